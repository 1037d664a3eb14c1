// Node-API marshalling only: JS values in, plain C++ structs to the kernel-facing classes,
// results back out. No policy and no system calls beyond what those classes do.
#include <napi.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include <memory>

extern char** environ;

#include "fd_poller.h"
#include "heap.h"
#include "netlink_watch.h"
#include "netns.h"
#include "netns_executor.h"
#include "nft_runner.h"
#include "nft_tables.h"
#include "seqpacket.h"
#include "step_clock.h"
#include "steps.h"

namespace ana {
namespace {

Napi::Error ToJsError(Napi::Env env, const SysError& e) {
  std::string code = uv_err_name(-e.errnum);
  std::string message = code + ": " + strerror(e.errnum) + ", " + e.syscall;
  if (!e.path.empty()) message += " '" + e.path + "'";
  if (!e.detail.empty()) message += ": " + e.detail;
  Napi::Error err = Napi::Error::New(env, message);
  err.Set("code", code);
  err.Set("errno", Napi::Number::New(env, -e.errnum));
  err.Set("syscall", e.syscall);
  if (!e.path.empty()) err.Set("path", e.path);
  if (!e.detail.empty()) err.Set("detail", e.detail);
  return err;
}

struct AddonState {
  std::unique_ptr<NetnsExecutor> executor;
  SysError executor_error;
  Napi::ThreadSafeFunction tsfn;
  size_t pending = 0;  // segments not settled yet; the loop is kept alive only while this is non-zero
  // A segment's post from its worker to its settlement on the JS thread (the event loop waking
  // and getting a CPU), summed; JS thread only.
  uint64_t results_delivered = 0;
  uint64_t result_wait_ns = 0;
  bool closing = false;
};

// One segment of a netns visit: its own steps, results and promise. A segment stops at its
// first failing step; the other segments of the visit run regardless.
struct Segment {
  explicit Segment(Napi::Env env) : deferred(Napi::Promise::Deferred::New(env)) {}
  void Settle(Napi::Env env, const SysError& enter_error);

  Napi::Promise::Deferred deferred;
  std::vector<Step> steps;
  std::vector<StepResult> results;
  size_t failed_step = 0;
  SysError error;
  bool ok = false;
};

// Step lists for one namespace, run in one visit (one setns there and back). Every segment but
// the last is settled as soon as it is done, from inside the namespace: a caller waiting on an
// early segment (lo up before ztunnel is told) does not wait for the later ones, nor, when it
// shares this CPU, for the next segment's syscalls (the worker yields after each early post).
class VisitJob : public NetnsJob {
 public:
  explicit VisitJob(AddonState* state) : state_(state) {}

  void RunInside() override {
    LazyRtnl rtnl;  // closed before the thread leaves the namespace
    for (size_t i = 0; i < segments.size(); i++) {
      Segment* s = segments[i].get();
      s->ok = RunSteps(s->steps, &rtnl, &s->results, &s->failed_step, &s->error);
      if (i + 1 < segments.size()) {
        Post(state_, std::move(segments[i]), SysError());
        NetnsExecutor::YieldToWokenThread();
      }
    }
  }

  void Complete(std::unique_ptr<NetnsJob> self) override {
    for (auto& s : segments) {
      if (s) Post(state_, std::move(s), enter_error);
    }
    self.reset();
  }

  std::vector<std::unique_ptr<Segment>> segments;

 private:
  struct Settlement {
    AddonState* state;
    std::unique_ptr<Segment> segment;
    SysError enter_error;
    uint64_t posted_ns;
  };

  static void Post(AddonState* state, std::unique_ptr<Segment> segment, const SysError& enter_error) {
    auto* settlement = new Settlement{state, std::move(segment), enter_error, MonotonicNs()};
    napi_status status = state->tsfn.NonBlockingCall(settlement, [](Napi::Env env, Napi::Function, Settlement* p) {
      std::unique_ptr<Settlement> owned(p);
      owned->state->results_delivered++;
      owned->state->result_wait_ns += MonotonicNs() - owned->posted_ns;
      if (--owned->state->pending == 0 && !owned->state->closing) owned->state->tsfn.Unref(env);
      owned->segment->Settle(env, owned->enter_error);
    });
    if (status != napi_ok) delete settlement;  // the environment is going away; nobody is waiting
  }

  AddonState* state_;
};

Napi::Object RuleToJs(Napi::Env env, const FwmarkRule& r) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("family", Napi::Number::New(env, r.family == AF_INET6 ? 6 : 4));
  o.Set("mark", r.mark);
  o.Set("mask", r.mask);
  o.Set("priority", r.priority);
  o.Set("table", r.table);
  return o;
}

Napi::Object RouteToJs(Napi::Env env, const RouteEntry& r) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("family", Napi::Number::New(env, r.family == AF_INET6 ? 6 : 4));
  o.Set("dst", r.dst);
  o.Set("dstLen", r.dst_len);
  o.Set("type", r.type);
  o.Set("dev", r.dev);
  o.Set("table", r.table);
  return o;
}

Napi::Object ResultToJs(Napi::Env env, const Step& step, const StepResult& r) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("op", step.name);
  switch (step.op) {
    case StepOp::kNft: o.Set("output", r.output); break;
    case StepOp::kNftGeneration: o.Set("generation", static_cast<double>(r.generation)); break;
    case StepOp::kNftCompile: o.Set("batch", Napi::Buffer<char>::Copy(env, r.batch.data(), r.batch.size())); break;
    case StepOp::kRoutingBatch: {
      Napi::Array arr = Napi::Array::New(env, r.routing.size());
      for (size_t i = 0; i < r.routing.size(); i++) {
        Napi::Object c = Napi::Object::New(env);
        c.Set("changed", r.routing[i].changed);
        c.Set("skipped", r.routing[i].skipped);
        arr.Set(i, c);
      }
      o.Set("changes", arr);
      break;
    }
    case StepOp::kNftBatch:
      if (r.has_generation)
        o.Set("generation", static_cast<double>(r.generation));
      else
        o.Set("generation", env.Null());
      o.Set("fallback", r.fallback);
      if (r.fallback) {
        o.Set("fallbackReason", r.fallback_reason);
        o.Set("generationBefore", static_cast<double>(r.generation_before));
      }
      break;
    case StepOp::kSocket:
    case StepOp::kNetlinkWatch: o.Set("fd", r.fd); break;
    case StepOp::kDeviceHasIpv6: o.Set("hasIpv6", r.flag); break;
    case StepOp::kNetnsId:
      o.Set("ino", static_cast<double>(r.netns.ino));
      o.Set("dev", static_cast<double>(r.netns.dev));
      break;
    case StepOp::kExec:
      o.Set("exitCode", r.spawn.exit_code);
      o.Set("signal", r.spawn.signal);
      o.Set("stdout", r.spawn.out);
      o.Set("stderr", r.spawn.err);
      break;
    case StepOp::kListFwmarkRules: {
      Napi::Array arr = Napi::Array::New(env, r.rules.size());
      for (size_t i = 0; i < r.rules.size(); i++) arr.Set(i, RuleToJs(env, r.rules[i]));
      o.Set("rules", arr);
      break;
    }
    case StepOp::kListAddresses: {
      Napi::Array arr = Napi::Array::New(env, r.addresses.size());
      for (size_t i = 0; i < r.addresses.size(); i++) {
        Napi::Object a = Napi::Object::New(env);
        a.Set("family", Napi::Number::New(env, r.addresses[i].family == AF_INET6 ? 6 : 4));
        a.Set("address", r.addresses[i].address);
        a.Set("prefixLen", Napi::Number::New(env, r.addresses[i].prefix_len));
        a.Set("dev", r.addresses[i].dev);
        arr.Set(i, a);
      }
      o.Set("addresses", arr);
      break;
    }
    case StepOp::kIpsetList: {
      o.Set("exists", r.ipset.exists);
      o.Set("typeName", r.ipset.type_name);
      o.Set("family", Napi::Number::New(env, r.ipset.family == AF_INET6 ? 6 : 4));
      o.Set("revision", r.ipset.revision);
      o.Set("comments", r.ipset.comments);
      Napi::Array arr = Napi::Array::New(env, r.ipset.entries.size());
      for (size_t i = 0; i < r.ipset.entries.size(); i++) {
        Napi::Object e = Napi::Object::New(env);
        e.Set("ip", r.ipset.entries[i].ip);
        e.Set("comment", r.ipset.entries[i].comment);
        arr.Set(i, e);
      }
      o.Set("entries", arr);
      break;
    }
    case StepOp::kListRoutes: {
      Napi::Array arr = Napi::Array::New(env, r.routes.size());
      for (size_t i = 0; i < r.routes.size(); i++) arr.Set(i, RouteToJs(env, r.routes[i]));
      o.Set("routes", arr);
      break;
    }
    default:
      o.Set("changed", r.changed);
      o.Set("skipped", r.skipped);
      break;
  }
  return o;
}

void Segment::Settle(Napi::Env env, const SysError& enter_error) {
  Napi::HandleScope scope(env);
  if (enter_error) {
    Napi::Error err = ToJsError(env, enter_error);
    err.Set("step", Napi::Number::New(env, -1));
    deferred.Reject(err.Value());
    return;
  }
  if (!ok) {
    Napi::Error err = ToJsError(env, error);
    err.Set("step", static_cast<double>(failed_step));
    err.Set("op", steps[failed_step].name);
    deferred.Reject(err.Value());
    return;
  }
  Napi::Array out = Napi::Array::New(env, results.size());
  for (size_t i = 0; i < results.size(); i++) out.Set(i, ResultToJs(env, steps[i], results[i]));
  deferred.Resolve(out);
}

// ---- argument parsing (TypeScript validates first; these checks are the backstop) ----

std::string GetString(const Napi::Object& o, const char* key) {
  Napi::Value v = o.Get(key);
  if (!v.IsString()) throw Napi::TypeError::New(o.Env(), std::string("step.") + key + " must be a string");
  return v.As<Napi::String>().Utf8Value();
}

// Numbers are range-checked here: a wrapped port or a timeout cast to a negative int (poll
// forever) must be a TypeError, never a silent surprise.
uint32_t GetUint(const Napi::Object& o, const char* key, double max = 4294967295.0) {
  Napi::Value v = o.Get(key);
  double d = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : -1;
  if (!(d >= 0 && d <= max) || d != static_cast<double>(static_cast<uint64_t>(d))) {
    throw Napi::TypeError::New(o.Env(), std::string("step.") + key + " must be an integer from 0 to " +
                                            std::to_string(static_cast<uint64_t>(max)));
  }
  return static_cast<uint32_t>(d);
}

uint32_t GetUintOr(const Napi::Object& o, const char* key, uint32_t fallback, double max = 4294967295.0) {
  return o.Get(key).IsUndefined() ? fallback : GetUint(o, key, max);
}

constexpr double kMaxPort = 65535;
constexpr double kMaxTimeoutMs = 24 * 3600 * 1000.0;  // fits an int; anything longer is a bug

int GetFamily(const Napi::Object& o) {
  uint32_t f = GetUint(o, "family");
  if (f != 4 && f != 6) throw Napi::TypeError::New(o.Env(), "step.family must be 4 or 6");
  return f == 6 ? AF_INET6 : AF_INET;
}

bool GetBoolOr(const Napi::Object& o, const char* key, bool fallback) {
  Napi::Value v = o.Get(key);
  return v.IsBoolean() ? v.As<Napi::Boolean>().Value() : fallback;
}

void ParseSocket(const Napi::Object& o, SocketSpec* s) {
  s->family = GetFamily(o);
  std::string type = GetString(o, "type");
  if (type != "tcp" && type != "udp") throw Napi::TypeError::New(o.Env(), "step.type must be tcp or udp");
  s->type = type == "tcp" ? SOCK_STREAM : SOCK_DGRAM;
  if (!o.Get("mark").IsUndefined()) {
    s->set_mark = true;
    s->mark = GetUint(o, "mark");
  }
  if (!o.Get("bindPort").IsUndefined() && o.Get("bindAddress").IsUndefined()) {
    throw Napi::TypeError::New(o.Env(), "step.bindPort needs step.bindAddress");
  }
  if (!o.Get("bindAddress").IsUndefined()) {
    s->bind_address = GetString(o, "bindAddress");
    s->bind_port = static_cast<uint16_t>(GetUintOr(o, "bindPort", 0, kMaxPort));
  }
  s->transparent = GetBoolOr(o, "transparent", false);
  s->reuse_port = GetBoolOr(o, "reusePort", false);
  if (!o.Get("listen").IsUndefined()) s->listen_backlog = static_cast<int>(GetUint(o, "listen", 65535));
  if (!o.Get("connectAddress").IsUndefined()) {
    s->connect_address = GetString(o, "connectAddress");
    s->connect_port = static_cast<uint16_t>(GetUint(o, "connectPort", kMaxPort));
    s->connect_timeout_ms = static_cast<int>(GetUintOr(o, "timeoutMs", 5000, kMaxTimeoutMs));
  }
}

void ParseExec(const Napi::Object& o, Step* s) {
  Napi::Value argv = o.Get("argv");
  if (!argv.IsArray()) throw Napi::TypeError::New(o.Env(), "step.argv must be an array of strings");
  Napi::Array arr = argv.As<Napi::Array>();
  for (uint32_t i = 0; i < arr.Length(); i++) {
    Napi::Value a = arr.Get(i);
    if (!a.IsString()) throw Napi::TypeError::New(o.Env(), "step.argv must be an array of strings");
    s->argv.push_back(a.As<Napi::String>().Utf8Value());
  }
  if (!o.Get("input").IsUndefined()) s->input = GetString(o, "input");
  Napi::Value env = o.Get("env");
  if (!env.IsUndefined()) {
    if (!env.IsObject() || env.IsArray()) throw Napi::TypeError::New(o.Env(), "step.env must be an object of strings");
    Napi::Object vars = env.As<Napi::Object>();
    Napi::Array names = vars.GetPropertyNames();
    s->replace_env = true;
    for (uint32_t i = 0; i < names.Length(); i++) {
      std::string name = names.Get(i).As<Napi::String>().Utf8Value();
      Napi::Value value = vars.Get(name);
      if (!value.IsString() || name.empty() || name.find('=') != std::string::npos) {
        throw Napi::TypeError::New(o.Env(), "step.env: names must be non-empty without '=', values strings");
      }
      s->env.push_back(name + "=" + value.As<Napi::String>().Utf8Value());
    }
  } else {
    // The worker thread must not read `environ` while JS may be changing process.env: copy it
    // here, on the JS thread.
    s->replace_env = true;
    for (char** e = environ; *e != nullptr; e++) s->env.emplace_back(*e);
  }
  s->timeout_ms = static_cast<int>(GetUintOr(o, "timeoutMs", 30000, kMaxTimeoutMs));
}

void ParseNftTables(const Napi::Object& o, Step* s) {
  if (!NftFamilyFromName(GetString(o, "family"), &s->nft_family)) {
    throw Napi::TypeError::New(o.Env(), "step.family must be inet, ip or ip6");
  }
  Napi::Value tables = o.Get("tables");
  if (!tables.IsArray()) throw Napi::TypeError::New(o.Env(), "step.tables must be an array of table names");
  Napi::Array arr = tables.As<Napi::Array>();
  for (uint32_t i = 0; i < arr.Length(); i++) {
    Napi::Value t = arr.Get(i);
    std::string name = t.IsString() ? t.As<Napi::String>().Utf8Value() : "";
    if (name.empty() || name.size() > kMaxNftTableName || name.find('\0') != std::string::npos) {
      throw Napi::TypeError::New(o.Env(), "step.tables: names must be 1-255 bytes without NUL");
    }
    s->tables.push_back(name);
  }
}

void ParseIpset(const Napi::Object& o, Step* s) {
  const std::string& op = s->name;
  if (op == "ipsetCreate")
    s->op = StepOp::kIpsetCreate;
  else if (op == "ipsetDestroy")
    s->op = StepOp::kIpsetDestroy;
  else if (op == "ipsetFlush")
    s->op = StepOp::kIpsetFlush;
  else if (op == "ipsetList")
    s->op = StepOp::kIpsetList;
  else if (op == "ipsetAdd")
    s->op = StepOp::kIpsetAdd;
  else
    s->op = StepOp::kIpsetDel;
  s->set_name = GetString(o, "name");
  if (s->set_name.empty() || s->set_name.size() > kMaxIpsetName || s->set_name.find('\0') != std::string::npos) {
    throw Napi::TypeError::New(o.Env(), "step.name must be 1-31 bytes without NUL");
  }
  if (s->op == StepOp::kIpsetCreate) s->family = GetFamily(o);
  if (s->op == StepOp::kIpsetAdd || s->op == StepOp::kIpsetDel) s->ip = GetString(o, "ip");
  if (s->op == StepOp::kIpsetAdd) {
    if (!o.Get("comment").IsUndefined()) s->comment = GetString(o, "comment");
    if (s->comment.size() > kMaxIpsetComment || s->comment.find('\0') != std::string::npos) {
      throw Napi::TypeError::New(o.Env(), "step.comment must be at most 255 bytes without NUL");
    }
    s->replace = GetBoolOr(o, "replace", true);
  }
}

void ParseNftBatch(const Napi::Object& o, Step* s) {
  Napi::Value batch = o.Get("batch");
  if (!batch.IsTypedArray() || batch.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
    throw Napi::TypeError::New(o.Env(), "nftBatch step: batch must be a Uint8Array (from an nftCompile step)");
  }
  Napi::Uint8Array bytes = batch.As<Napi::Uint8Array>();
  s->batch.assign(reinterpret_cast<const char*>(bytes.Data()),
                  reinterpret_cast<const char*>(bytes.Data()) + bytes.ByteLength());
  s->script = GetString(o, "script");
}

void ParseRule(const Napi::Object& o, Step* s);

RoutingChange ParseRoutingChange(const Napi::Object& o) {
  RoutingChange c;
  std::string kind = GetString(o, "kind");
  if (kind == "addFwmarkRule" || kind == "deleteFwmarkRule") {
    c.kind = kind == "addFwmarkRule" ? RoutingChangeKind::kAddFwmarkRule : RoutingChangeKind::kDeleteFwmarkRule;
    Step tmp;
    ParseRule(o, &tmp);
    c.rule = tmp.rule;
  } else if (kind == "replaceLocalRoute" || kind == "deleteLocalRoute") {
    c.kind = kind == "replaceLocalRoute" ? RoutingChangeKind::kReplaceLocalRoute : RoutingChangeKind::kDeleteLocalRoute;
    c.family = GetFamily(o);
    c.table = GetUint(o, "table");
    c.dev = GetString(o, "dev");
    c.skip_without_ipv6 = GetBoolOr(o, "skipWithoutIpv6", false);
  } else {
    throw Napi::TypeError::New(o.Env(), "routing step: unknown change kind: " + kind);
  }
  return c;
}

void ParseRoutingBatch(const Napi::Object& o, Step* s) {
  Napi::Value changes = o.Get("changes");
  if (!changes.IsArray()) throw Napi::TypeError::New(o.Env(), "routing step: changes must be an array");
  Napi::Array arr = changes.As<Napi::Array>();
  for (uint32_t i = 0; i < arr.Length(); i++) {
    Napi::Value v = arr.Get(i);
    if (!v.IsObject()) throw Napi::TypeError::New(o.Env(), "routing step: every change must be an object");
    s->routing.push_back(ParseRoutingChange(v.As<Napi::Object>()));
  }
}

void ParseRule(const Napi::Object& o, Step* s) {
  s->rule.family = GetFamily(o);
  s->rule.mark = GetUint(o, "mark");
  s->rule.mask = GetUint(o, "mask");
  s->rule.priority = GetUint(o, "priority");
  s->rule.table = GetUint(o, "table");
}

Step ParseStep(const Napi::Object& o) {
  Step s;
  s.name = GetString(o, "op");
  const std::string& op = s.name;
  if (op == "nft") {
    s.op = StepOp::kNft;
    s.script = GetString(o, "script");
    s.stateless = GetBoolOr(o, "stateless", true);
    s.json = GetBoolOr(o, "json", false);
  } else if (op == "addFwmarkRule" || op == "deleteFwmarkRule") {
    s.op = op == "addFwmarkRule" ? StepOp::kAddFwmarkRule : StepOp::kDeleteFwmarkRule;
    ParseRule(o, &s);
  } else if (op == "replaceLocalRoute" || op == "deleteLocalRoute") {
    s.op = op == "replaceLocalRoute" ? StepOp::kReplaceLocalRoute : StepOp::kDeleteLocalRoute;
    s.family = GetFamily(o);
    s.table = GetUint(o, "table");
    s.dev = GetString(o, "dev");
    s.skip_without_ipv6 = GetBoolOr(o, "skipWithoutIpv6", false);
  } else if (op == "listFwmarkRules") {
    s.op = StepOp::kListFwmarkRules;
    s.family = GetFamily(o);
  } else if (op == "listRoutes") {
    s.op = StepOp::kListRoutes;
    s.family = GetFamily(o);
    s.table = GetUint(o, "table");
  } else if (op == "deviceHasIpv6") {
    s.op = StepOp::kDeviceHasIpv6;
    s.dev = GetString(o, "dev");
  } else if (op == "setLinkUp") {
    s.op = StepOp::kSetLinkUp;
    s.dev = GetString(o, "dev");
  } else if (op == "listAddresses") {
    s.op = StepOp::kListAddresses;
  } else if (op == "socket") {
    s.op = StepOp::kSocket;
    ParseSocket(o, &s.socket);
  } else if (op == "exec") {
    s.op = StepOp::kExec;
    ParseExec(o, &s);
  } else if (op == "netnsId") {
    s.op = StepOp::kNetnsId;
  } else if (op == "nftGeneration") {
    s.op = StepOp::kNftGeneration;
  } else if (op == "ipsetCreate" || op == "ipsetDestroy" || op == "ipsetFlush" || op == "ipsetList" ||
             op == "ipsetAdd" || op == "ipsetDel") {
    ParseIpset(o, &s);
  } else if (op == "netlinkWatch") {
    s.op = StepOp::kNetlinkWatch;
    std::string kind = GetString(o, "kind");
    if (kind != "nftables" && kind != "routing")
      throw Napi::TypeError::New(o.Env(), "netlinkWatch step: kind must be nftables or routing");
    s.watch = kind == "nftables" ? WatchKind::kNftables : WatchKind::kRouting;
  } else if (op == "deleteNftTables") {
    s.op = StepOp::kDeleteNftTables;
    ParseNftTables(o, &s);
  } else if (op == "routing") {
    s.op = StepOp::kRoutingBatch;
    ParseRoutingBatch(o, &s);
  } else if (op == "nftCompile") {
    s.op = StepOp::kNftCompile;
    ParseNftTables(o, &s);
  } else if (op == "nftBatch") {
    s.op = StepOp::kNftBatch;
    ParseNftBatch(o, &s);
  } else {
    throw Napi::TypeError::New(o.Env(), "unknown step op: " + op);
  }
  return s;
}

// ---- exports ----

AddonState* State(Napi::Env env) { return env.GetInstanceData<AddonState>(); }

// A numeric fd argument; `usage` is the TypeError's message otherwise.
int FdArg(const Napi::CallbackInfo& info, size_t i, const char* usage) {
  if (!info[i].IsNumber()) throw Napi::TypeError::New(info.Env(), usage);
  return info[i].As<Napi::Number>().Int32Value();
}

Napi::Object NetnsInfo(Napi::Env env, int fd, const NetnsId& id) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("fd", fd);
  o.Set("ino", static_cast<double>(id.ino));
  o.Set("dev", static_cast<double>(id.dev));
  return o;
}

Napi::Value OpenNetnsJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString()) throw Napi::TypeError::New(env, "openNetns(path): path must be a string");
  NetnsId id;
  SysError err;
  int fd = OpenNetns(info[0].As<Napi::String>().Utf8Value(), &id, &err);
  if (fd < 0) throw ToJsError(env, err);
  return NetnsInfo(env, fd, id);
}

Napi::Value OpenNetnsInDirectoryJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString() || !info[1].IsString()) {
    throw Napi::TypeError::New(env, "openNetnsInDirectory(directory, name): both must be strings");
  }
  NetnsId id;
  SysError err;
  std::string directory;
  int fd = OpenNetnsInDirectory(info[0].As<Napi::String>().Utf8Value(), info[1].As<Napi::String>().Utf8Value(), &id,
                                &directory, &err);
  if (fd < 0) throw ToJsError(env, err);
  Napi::Object o = NetnsInfo(env, fd, id);
  o.Set("directory", directory);
  return o;
}

Napi::Value NetnsFdOfJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SysError err;
  int fd = NetnsFdOf(FdArg(info, 0, "netnsFdOf(fd): fd must be a number"), &err);
  if (fd < 0) throw ToJsError(env, err);
  return Napi::Number::New(env, fd);
}

Napi::Value CloseFdJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (close(FdArg(info, 0, "closeFd(fd): fd must be a number")) != 0) {
    throw ToJsError(env, SysError::FromErrno(errno, "close"));
  }
  return env.Undefined();
}

std::unique_ptr<Segment> ParseSegment(Napi::Env env, const Napi::Value& value) {
  if (!value.IsArray()) throw Napi::TypeError::New(env, "runInNetns: steps must be an array");
  auto segment = std::make_unique<Segment>(env);
  Napi::Array steps = value.As<Napi::Array>();
  for (uint32_t i = 0; i < steps.Length(); i++) {
    Napi::Value v = steps.Get(i);
    if (!v.IsObject()) throw Napi::TypeError::New(env, "runInNetns: every step must be an object");
    segment->steps.push_back(ParseStep(v.As<Napi::Object>()));
  }
  return segment;
}

// (fd|null, segments, options): `segments` is one step list, or (visit) an array of them.
std::unique_ptr<VisitJob> MakeJob(const Napi::CallbackInfo& info, AddonState* state, bool visit) {
  Napi::Env env = info.Env();
  if (!info[0].IsNumber() && !info[0].IsNull()) {
    throw Napi::TypeError::New(env, "runInNetns(fd|null, steps): fd must be a number or null");
  }
  if (!info[1].IsArray()) throw Napi::TypeError::New(env, "runInNetns(fd|null, steps): steps must be an array");
  auto job = std::make_unique<VisitJob>(state);
  if (visit) {
    Napi::Array segments = info[1].As<Napi::Array>();
    if (segments.Length() == 0) throw Napi::TypeError::New(env, "visitNetns: at least one step list");
    for (uint32_t i = 0; i < segments.Length(); i++) job->segments.push_back(ParseSegment(env, segments.Get(i)));
  } else {
    job->segments.push_back(ParseSegment(env, info[1]));
  }
  if (info[2].IsObject()) job->poison_return = GetBoolOr(info[2].As<Napi::Object>(), "poisonReturn", false);
  if (info[0].IsNumber()) {
    // The job keeps its own fd of the namespace so JS may close its own while the job waits.
    SysError err;
    job->target_fd = NetnsFdOf(info[0].As<Napi::Number>().Int32Value(), &err);
    if (job->target_fd < 0) throw ToJsError(env, err);
  }
  return job;
}

// Returns the segments' promises (runInNetns: the one promise).
Napi::Value SubmitJob(const Napi::CallbackInfo& info, bool visit) {
  Napi::Env env = info.Env();
  AddonState* state = State(env);
  if (!state->executor || state->executor_error) throw ToJsError(env, state->executor_error);
  std::unique_ptr<VisitJob> job = MakeJob(info, state, visit);
  Napi::Array promises = Napi::Array::New(env, job->segments.size());
  for (size_t i = 0; i < job->segments.size(); i++) promises.Set(i, job->segments[i]->deferred.Promise());
  if (state->pending == 0) state->tsfn.Ref(env);
  state->pending += job->segments.size();
  state->executor->Submit(std::move(job));
  return visit ? Napi::Value(promises) : promises.Get(0u);
}

Napi::Value RunInNetnsJs(const Napi::CallbackInfo& info) { return SubmitJob(info, false); }
Napi::Value VisitNetnsJs(const Napi::CallbackInfo& info) { return SubmitJob(info, true); }

// The calling thread's CPU seconds: on the JS thread, the event loop's own.
Napi::Value ThreadCpuSecondsJs(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(ThreadCpuNs()) / 1e9);
}

Napi::Value WarmUpJs(const Napi::CallbackInfo& info) {
  NftRunner::WarmUp();
  return info.Env().Undefined();
}

Napi::Object StepTotalsToJs(Napi::Env env) {
  Napi::Object steps = Napi::Object::New(env);
  for (const StepTimeTotal& t : StepClock::Totals()) {
    Napi::Object total = Napi::Object::New(env);
    total.Set("count", static_cast<double>(t.count));
    total.Set("cpuSeconds", static_cast<double>(t.cpu_ns) / 1e9);
    total.Set("wallSeconds", static_cast<double>(t.wall_ns) / 1e9);
    steps.Set(t.step, total);
  }
  return steps;
}

// Every field, zero without an executor (it could not start): /metrics reads them all.
Napi::Value ExecutorStatsJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  AddonState* state = State(env);
  ExecutorStats s = state->executor ? state->executor->Stats() : ExecutorStats{};
  o.Set("threadsStarted", s.threads_started);
  o.Set("threadsRetired", s.threads_retired);
  o.Set("threadsAlive", s.threads_alive);
  o.Set("jobsRun", static_cast<double>(s.jobs_run));
  o.Set("pending", static_cast<double>(state->pending));
  o.Set("queueWaitSeconds", static_cast<double>(s.queue_wait_ns) / 1e9);
  o.Set("resultsDelivered", static_cast<double>(state->results_delivered));
  o.Set("resultWaitSeconds", static_cast<double>(state->result_wait_ns) / 1e9);
  o.Set("steps", StepTotalsToJs(env));
  return o;
}

// ---- the C library's heap ----

// malloc_trim on a libuv pool thread: it walks every arena under its lock, which the JS
// thread must not wait for.
class ReleaseFreeHeapWorker : public Napi::AsyncWorker {
 public:
  explicit ReleaseFreeHeapWorker(Napi::Env env)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }
  void Execute() override { result_ = ReleaseFreeHeap(); }
  void OnOK() override {
    Napi::Env env = Env();
    Napi::Object o = Napi::Object::New(env);
    o.Set("released", result_.released);
    o.Set("freeBytes", static_cast<double>(result_.free_bytes));
    o.Set("arenaBytes", static_cast<double>(result_.arena_bytes));
    o.Set("seconds", static_cast<double>(result_.duration_ns) / 1e9);
    deferred_.Resolve(o);
  }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  HeapRelease result_;
};

Napi::Value ReleaseFreeHeapJs(const Napi::CallbackInfo& info) {
  auto* worker = new ReleaseFreeHeapWorker(info.Env());  // deleted by node-addon-api once settled
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

// ---- SOCK_SEQPACKET (ZDS) ----

Napi::Value SeqpacketListenJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString()) throw Napi::TypeError::New(env, "seqpacketListen(path, options): path must be a string");
  ListenOptions opts;
  opts.path = info[0].As<Napi::String>().Utf8Value();
  if (info[1].IsObject()) {
    Napi::Object o = info[1].As<Napi::Object>();
    opts.mode = GetUintOr(o, "mode", opts.mode, 07777);
    opts.dir_mode = GetUintOr(o, "dirMode", opts.dir_mode, 07777);
    opts.backlog = static_cast<int>(GetUintOr(o, "backlog", opts.backlog, 65535));
  }
  SysError err;
  int fd = SeqpacketListen(opts, &err);
  if (fd < 0) throw ToJsError(env, err);
  return Napi::Number::New(env, fd);
}

Napi::Value SeqpacketAcceptJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SysError err;
  int fd = SeqpacketAccept(FdArg(info, 0, "seqpacketAccept(fd)"), &err);
  if (fd == -1) throw ToJsError(env, err);
  return fd == -2 ? env.Null() : Napi::Number::New(env, fd);
}

Napi::Value SeqpacketConnectJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString()) throw Napi::TypeError::New(env, "seqpacketConnect(path): path must be a string");
  SysError err;
  int fd = SeqpacketConnect(info[0].As<Napi::String>().Utf8Value(), &err);
  if (fd < 0) throw ToJsError(env, err);
  return Napi::Number::New(env, fd);
}

Napi::Value SeqpacketSendJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = FdArg(info, 0, "seqpacketSend(fd, data, passFd)");
  if (!info[1].IsTypedArray()) throw Napi::TypeError::New(env, "seqpacketSend: data must be a Uint8Array");
  Napi::Uint8Array data = info[1].As<Napi::Uint8Array>();
  int pass_fd = info[2].IsNumber() ? info[2].As<Napi::Number>().Int32Value() : -1;
  // ZDS peers read 1024 bytes and take an empty datagram for EOF: never send either.
  if (data.ByteLength() == 0 || data.ByteLength() > kZdsMaxDatagram) {
    throw ToJsError(env, SysError::FromErrno(EMSGSIZE, "sendmsg", "", "datagram must be 1-1024 bytes"));
  }
  SysError err;
  // A pod's namespace held by a socket inside it: ztunnel gets a namespace fd all the same.
  int made = -1;
  if (pass_fd >= 0 && (pass_fd = PassableNetnsFd(pass_fd, &made, &err)) < 0) throw ToJsError(env, err);
  int rc = SeqpacketSend(fd, data.Data(), data.ByteLength(), pass_fd, &err);
  if (made >= 0) close(made);
  if (rc < 0) throw ToJsError(env, err);
  return Napi::Boolean::New(env, rc == 1);
}

Napi::Value SeqpacketRecvJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Datagram d;
  SysError err;
  int rc = SeqpacketRecv(FdArg(info, 0, "seqpacketRecv(fd)"), &d, &err);
  if (rc < 0) throw ToJsError(env, err);
  if (rc == 0) return env.Null();
  Napi::Object o = Napi::Object::New(env);
  o.Set("data", Napi::Buffer<unsigned char>::Copy(env, d.data.data(), d.data.size()));
  Napi::Array fds = Napi::Array::New(env, d.fds.size());
  for (size_t i = 0; i < d.fds.size(); i++) fds.Set(i, Napi::Number::New(env, d.fds[i]));
  o.Set("fds", fds);
  o.Set("truncated", d.truncated);
  o.Set("controlTruncated", d.control_truncated);
  o.Set("eof", d.eof);
  return o;
}

Napi::Value OriginalDestinationJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SocketAddress addr;
  SysError err;
  if (!OriginalDestination(FdArg(info, 0, "originalDestination(fd)"), &addr, &err)) throw ToJsError(env, err);
  Napi::Object o = Napi::Object::New(env);
  o.Set("address", addr.address);
  o.Set("port", Napi::Number::New(env, addr.port));
  return o;
}

// ---- netlink watches (opened by a netlinkWatch step inside the namespace) ----

Napi::Value NetlinkWatchDrainJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = FdArg(info, 0, "netlinkWatchDrain(fd, table)");
  if (!info[1].IsNumber()) throw Napi::TypeError::New(env, "netlinkWatchDrain(fd, table): table must be a number");
  WatchEvents events;
  SysError err;
  if (!DrainNetlinkWatch(fd, info[1].As<Napi::Number>().Uint32Value(), &events, &err)) throw ToJsError(env, err);
  Napi::Object o = Napi::Object::New(env);
  o.Set("rules", events.rules);
  o.Set("routes", events.routes);
  o.Set("addresses", events.addresses);
  o.Set("overrun", events.overrun);
  return o;
}

Napi::Value NftWatchGenerationJs(const Napi::CallbackInfo& info) {
  int fd = FdArg(info, 0, "nftWatchGeneration(fd)");
  uint32_t generation = 0;
  SysError err;
  if (!QueryNftGeneration(fd, &generation, &err)) throw ToJsError(info.Env(), err);
  return Napi::Number::New(info.Env(), generation);
}

void Cleanup(void* arg) {
  auto* state = static_cast<AddonState*>(arg);
  state->closing = true;
  if (state->executor) state->executor->Stop();
  state->tsfn.Release();
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  auto* state = new AddonState();
  state->executor = std::make_unique<NetnsExecutor>(NetnsExecutor::PoolSize(), &state->executor_error);
  Napi::Function noop = Napi::Function::New(env, [](const Napi::CallbackInfo&) {});
  state->tsfn = Napi::ThreadSafeFunction::New(env, noop, "ambient-netns", 0, 1);
  state->tsfn.Unref(env);
  env.SetInstanceData<AddonState>(state);
  napi_add_env_cleanup_hook(env, Cleanup, state);

  exports.Set("openNetns", Napi::Function::New(env, OpenNetnsJs, "openNetns"));
  exports.Set("openNetnsInDirectory", Napi::Function::New(env, OpenNetnsInDirectoryJs, "openNetnsInDirectory"));
  exports.Set("closeFd", Napi::Function::New(env, CloseFdJs, "closeFd"));
  exports.Set("netnsFdOf", Napi::Function::New(env, NetnsFdOfJs, "netnsFdOf"));
  exports.Set("runInNetns", Napi::Function::New(env, RunInNetnsJs, "runInNetns"));
  exports.Set("visitNetns", Napi::Function::New(env, VisitNetnsJs, "visitNetns"));
  exports.Set("warmUp", Napi::Function::New(env, WarmUpJs, "warmUp"));
  exports.Set("threadCpuSeconds", Napi::Function::New(env, ThreadCpuSecondsJs, "threadCpuSeconds"));
  exports.Set("executorStats", Napi::Function::New(env, ExecutorStatsJs, "executorStats"));
  exports.Set("releaseFreeHeap", Napi::Function::New(env, ReleaseFreeHeapJs, "releaseFreeHeap"));
  exports.Set("seqpacketListen", Napi::Function::New(env, SeqpacketListenJs, "seqpacketListen"));
  exports.Set("seqpacketAccept", Napi::Function::New(env, SeqpacketAcceptJs, "seqpacketAccept"));
  exports.Set("seqpacketConnect", Napi::Function::New(env, SeqpacketConnectJs, "seqpacketConnect"));
  exports.Set("seqpacketSend", Napi::Function::New(env, SeqpacketSendJs, "seqpacketSend"));
  exports.Set("seqpacketRecv", Napi::Function::New(env, SeqpacketRecvJs, "seqpacketRecv"));
  exports.Set("FdPoller", FdPoller::Define(env));
  exports.Set("netlinkWatchDrain", Napi::Function::New(env, NetlinkWatchDrainJs, "netlinkWatchDrain"));
  exports.Set("nftWatchGeneration", Napi::Function::New(env, NftWatchGenerationJs, "nftWatchGeneration"));
  exports.Set("originalDestination", Napi::Function::New(env, OriginalDestinationJs, "originalDestination"));
  Napi::Object events = Napi::Object::New(env);
  events.Set("readable", Napi::Number::New(env, UV_READABLE));
  events.Set("writable", Napi::Number::New(env, UV_WRITABLE));
  events.Set("disconnect", Napi::Number::New(env, UV_DISCONNECT));
  exports.Set("pollEvents", events);
  return exports;
}

}  // namespace
}  // namespace ana

static Napi::Object InitAmbientNative(Napi::Env env, Napi::Object exports) { return ana::Init(env, exports); }

NODE_API_MODULE(ambient_native, InitAmbientNative)
