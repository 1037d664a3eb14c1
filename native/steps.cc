#include "steps.h"

#include <string.h>
#include <unistd.h>

#include "nft_batch.h"
#include "nft_runner.h"
#include "nft_tables.h"
#include "step_clock.h"

namespace ana {
namespace {

bool ReplaceRoute(Rtnl* rtnl, const Step& s, StepResult* r, SysError* err) {
  if (s.skip_without_ipv6) {
    bool has = false;
    if (!rtnl->DeviceIpv6Enabled(s.dev, &has, err)) return false;
    if (!has) {
      r->skipped = true;
      return true;
    }
  }
  r->changed = true;
  return rtnl->ReplaceLocalDefaultRoute(s.family, s.table, s.dev, err);
}

// The prebuilt batch, or the same rules as text through libnftables if the kernel refuses it
// (an atomic batch that was refused changed nothing, so the text starts from the same state).
bool RunNftBatch(const Step& s, StepResult* r, SysError* err) {
  NftBatchOutcome outcome;
  if (!SendNftBatch(s.batch, &outcome, err)) return false;
  r->changed = true;
  r->has_generation = outcome.has_generation;
  r->generation = outcome.generation;
  if (!outcome.refused) return true;
  r->fallback = true;
  const SysError& why = outcome.refusal;
  r->fallback_reason = std::string(strerror(why.errnum)) + " (" + why.path + ")";
  // The text's commit has no echo: the generations before and after it go back (rare path, two
  // requests more), and the caller decides whether the one after is the text's own.
  std::string ignored;
  if (!NftGeneration(&r->generation_before, err) || !NftRunner::Run(s.script, true, false, &ignored, err) ||
      !NftGeneration(&r->generation, err)) {
    return false;
  }
  r->has_generation = true;
  return true;
}

bool RunRouting(const Step& s, LazyRtnl* lazy, StepResult* r, SysError* err) {
  Rtnl* rtnl = lazy->Get(err);
  if (!rtnl) return false;
  switch (s.op) {
    case StepOp::kAddFwmarkRule: return rtnl->AddFwmarkRule(s.rule, &r->changed, err);
    case StepOp::kDeleteFwmarkRule: return rtnl->DeleteFwmarkRule(s.rule, &r->changed, err);
    case StepOp::kReplaceLocalRoute: return ReplaceRoute(rtnl, s, r, err);
    case StepOp::kDeleteLocalRoute: return rtnl->DeleteLocalDefaultRoute(s.family, s.table, s.dev, &r->changed, err);
    case StepOp::kListFwmarkRules: return rtnl->ListFwmarkRules(s.family, &r->rules, err);
    case StepOp::kListRoutes: return rtnl->ListRoutes(s.family, s.table, &r->routes, err);
    case StepOp::kDeviceHasIpv6: return rtnl->DeviceIpv6Enabled(s.dev, &r->flag, err);
    case StepOp::kSetLinkUp: return rtnl->SetLinkUp(s.dev, &r->changed, err);
    case StepOp::kListAddresses: return rtnl->ListAddresses(&r->addresses, err);
    case StepOp::kRoutingBatch: return ApplyRoutingBatch(rtnl, s.routing, &r->routing, err);
    default: break;
  }
  *err = SysError::FromErrno(EINVAL, "step", s.name, "not a routing step");
  return false;
}

bool RunStep(const Step& s, LazyRtnl* rtnl, StepResult* r, SysError* err) {
  switch (s.op) {
    case StepOp::kNft: return NftRunner::Run(s.script, s.stateless, s.json, &r->output, err);
    case StepOp::kSocket: r->fd = CreateSocket(s.socket, err); return r->fd >= 0;
    case StepOp::kNetlinkWatch: r->fd = OpenNetlinkWatch(s.watch, err); return r->fd >= 0;
    case StepOp::kExec:
      rtnl->ForgetLinks();
      return SpawnAndWait(s.argv, s.input, s.timeout_ms, &r->spawn, err, s.replace_env, s.env);
    case StepOp::kNetnsId: return CurrentThreadNetns(&r->netns, err);
    case StepOp::kNftGeneration: return NftGeneration(&r->generation, err);
    case StepOp::kNftBatch: return RunNftBatch(s, r, err);
    case StepOp::kNftCompile: return CompileNftTablesBatch(s.nft_family, s.tables, &r->batch, err);
    case StepOp::kDeleteNftTables: r->changed = true; return DeleteNftTables(s.nft_family, s.tables, err);
    case StepOp::kIpsetCreate: r->changed = true; return IpsetCreateHashIp(s.set_name, s.family, &r->skipped, err);
    case StepOp::kIpsetDestroy: r->changed = true; return IpsetDestroy(s.set_name, err);
    case StepOp::kIpsetFlush: r->changed = true; return IpsetFlush(s.set_name, err);
    case StepOp::kIpsetList: return IpsetList(s.set_name, &r->ipset, err);
    case StepOp::kIpsetAdd: r->changed = true; return IpsetAdd(s.set_name, s.ip, s.comment, s.replace, err);
    case StepOp::kIpsetDel: return IpsetDel(s.set_name, s.ip, &r->changed, err);
    default: return RunRouting(s, rtnl, r, err);
  }
}

}  // namespace

Rtnl* LazyRtnl::Get(SysError* err) {
  if (!opened_ && !rtnl_.Open(err)) return nullptr;
  opened_ = true;
  return &rtnl_;
}

bool RunSteps(const std::vector<Step>& steps, LazyRtnl* rtnl, std::vector<StepResult>* results, size_t* failed_step,
              SysError* err) {
  results->assign(steps.size(), StepResult{});
  for (size_t i = 0; i < steps.size(); i++) {
    StepClock clock;
    bool ok = RunStep(steps[i], rtnl, &(*results)[i], err);
    clock.Stop(steps[i].name);
    if (ok) continue;
    *failed_step = i;
    for (auto& r : *results) {
      if (r.fd >= 0) close(r.fd);
      r.fd = -1;
    }
    return false;
  }
  return true;
}

}  // namespace ana
