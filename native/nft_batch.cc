#include "nft_batch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/rule.h>
#include <libnftnl/table.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <string.h>
#include <time.h>

#include <memory>

#include "nfnl_socket.h"
#include "nft_tables.h"

namespace ana {
namespace {

constexpr size_t kBufSize = 65536;          // dumps
constexpr size_t kAckBufSize = 16384;       // batch answers
constexpr size_t kMaxBatchBytes = 1 << 20;  // far above any in-pod ruleset (~6 KiB)
constexpr uint16_t kNftMsg(int msg) { return static_cast<uint16_t>((NFNL_SUBSYS_NFTABLES << 8) | msg); }

struct TableFree {
  void operator()(nftnl_table* t) const { nftnl_table_free(t); }
};
struct ChainFree {
  void operator()(nftnl_chain* c) const { nftnl_chain_free(c); }
};
struct RuleFree {
  void operator()(nftnl_rule* r) const { nftnl_rule_free(r); }
};
using TablePtr = std::unique_ptr<nftnl_table, TableFree>;
using ChainPtr = std::unique_ptr<nftnl_chain, ChainFree>;
using RulePtr = std::unique_ptr<nftnl_rule, RuleFree>;

struct Dumped {
  std::vector<TablePtr> tables;
  std::vector<ChainPtr> chains;
  std::vector<RulePtr> rules;
};

int OnTable(const nlmsghdr* nlh, void* data) {
  TablePtr t(nftnl_table_alloc());
  if (!t || nftnl_table_nlmsg_parse(nlh, t.get()) < 0) return MNL_CB_ERROR;
  static_cast<Dumped*>(data)->tables.push_back(std::move(t));
  return MNL_CB_OK;
}

int OnChain(const nlmsghdr* nlh, void* data) {
  ChainPtr c(nftnl_chain_alloc());
  if (!c || nftnl_chain_nlmsg_parse(nlh, c.get()) < 0) return MNL_CB_ERROR;
  static_cast<Dumped*>(data)->chains.push_back(std::move(c));
  return MNL_CB_OK;
}

int OnRule(const nlmsghdr* nlh, void* data) {
  RulePtr r(nftnl_rule_alloc());
  if (!r || nftnl_rule_nlmsg_parse(nlh, r.get()) < 0) return MNL_CB_ERROR;
  static_cast<Dumped*>(data)->rules.push_back(std::move(r));
  return MNL_CB_OK;
}

// One NLM_F_DUMP request for a whole family; the kernel answers in creation order.
bool Dump(mnl_socket* sock, int msg, uint8_t family, mnl_cb_t cb, Dumped* out, SysError* err) {
  std::vector<char> buf(kBufSize);
  uint32_t seq = static_cast<uint32_t>(time(nullptr)) + static_cast<uint32_t>(msg);
  nlmsghdr* nlh = nftnl_nlmsg_build_hdr(buf.data(), static_cast<uint16_t>(msg), family, NLM_F_DUMP, seq);
  if (mnl_socket_sendto(sock, nlh, nlh->nlmsg_len) < 0) {
    *err = SysError::FromErrno(errno, "sendto", "NETLINK_NETFILTER");
    return false;
  }
  uint32_t port = mnl_socket_get_portid(sock);
  for (;;) {
    ssize_t n = mnl_socket_recvfrom(sock, buf.data(), buf.size());
    if (n < 0) {
      *err = SysError::FromErrno(errno, "recvfrom", "NETLINK_NETFILTER dump");
      return false;
    }
    int rc = mnl_cb_run(buf.data(), n, seq, port, cb, out);
    if (rc == MNL_CB_STOP) return true;
    if (rc < 0) {
      *err = SysError::FromErrno(errno ? errno : EPROTO, "nfnetlink", "dump", "could not read the kernel's ruleset");
      return false;
    }
  }
}

bool Named(const char* table, const std::string& name) { return table != nullptr && name == table; }

class MessageWriter {
 public:
  explicit MessageWriter(std::vector<char>* out) : out_(out), buf_(kBufSize) {}

  nlmsghdr* Start(int msg, uint8_t family, uint16_t flags) {
    return nftnl_nlmsg_build_hdr(buf_.data(), static_cast<uint16_t>(msg), family, flags, 0);
  }
  void Finish(const nlmsghdr* nlh) {
    const char* p = reinterpret_cast<const char*>(nlh);
    out_->insert(out_->end(), p, p + NLMSG_ALIGN(nlh->nlmsg_len));
  }

 private:
  std::vector<char>* out_;
  std::vector<char> buf_;
};

void WriteTable(MessageWriter* w, uint8_t family, nftnl_table* t) {
  // Handles, use counts and owners describe the source namespace, not the rules.
  nftnl_table_unset(t, NFTNL_TABLE_HANDLE);
  nftnl_table_unset(t, NFTNL_TABLE_USE);
  nftnl_table_unset(t, NFTNL_TABLE_OWNER);
  nlmsghdr* nlh = w->Start(NFT_MSG_NEWTABLE, family, NLM_F_CREATE);
  nftnl_table_nlmsg_build_payload(nlh, t);
  w->Finish(nlh);
  // `flush table`: a DELRULE naming only the table deletes every rule in all its chains.
  RulePtr flush(nftnl_rule_alloc());
  nftnl_rule_set_str(flush.get(), NFTNL_RULE_TABLE, nftnl_table_get_str(t, NFTNL_TABLE_NAME));
  nlh = w->Start(NFT_MSG_DELRULE, family, 0);
  nftnl_rule_nlmsg_build_payload(nlh, flush.get());
  w->Finish(nlh);
}

void WriteChain(MessageWriter* w, uint8_t family, nftnl_chain* c) {
  nftnl_chain_unset(c, NFTNL_CHAIN_HANDLE);
  nftnl_chain_unset(c, NFTNL_CHAIN_USE);
  nftnl_chain_unset(c, NFTNL_CHAIN_BYTES);
  nftnl_chain_unset(c, NFTNL_CHAIN_PACKETS);
  nftnl_chain_unset(c, NFTNL_CHAIN_ID);
  // NFT_CHAIN_BASE is the kernel's own note that the chain has a hook; nft never sends it.
  if (nftnl_chain_is_set(c, NFTNL_CHAIN_FLAGS)) {
    uint32_t flags = nftnl_chain_get_u32(c, NFTNL_CHAIN_FLAGS) & ~static_cast<uint32_t>(NFT_CHAIN_BASE);
    if (flags == 0)
      nftnl_chain_unset(c, NFTNL_CHAIN_FLAGS);
    else
      nftnl_chain_set_u32(c, NFTNL_CHAIN_FLAGS, flags);
  }
  nlmsghdr* nlh = w->Start(NFT_MSG_NEWCHAIN, family, NLM_F_CREATE);
  nftnl_chain_nlmsg_build_payload(nlh, c);
  w->Finish(nlh);
}

void WriteRule(MessageWriter* w, uint8_t family, nftnl_rule* r) {
  nftnl_rule_unset(r, NFTNL_RULE_HANDLE);
  nftnl_rule_unset(r, NFTNL_RULE_POSITION);
  nftnl_rule_unset(r, NFTNL_RULE_ID);
  nftnl_rule_unset(r, NFTNL_RULE_POSITION_ID);
  nlmsghdr* nlh = w->Start(NFT_MSG_NEWRULE, family, NLM_F_CREATE | NLM_F_APPEND);
  nftnl_rule_nlmsg_build_payload(nlh, r);
  w->Finish(nlh);
}

bool AllowedMessage(uint16_t type) {
  return type == kNftMsg(NFT_MSG_NEWTABLE) || type == kNftMsg(NFT_MSG_DELRULE) || type == kNftMsg(NFT_MSG_NEWCHAIN) ||
         type == kNftMsg(NFT_MSG_NEWRULE);
}

// Counts the messages and rejects anything SendNftBatch was not made for.
bool CheckMessages(const std::vector<char>& messages, size_t* count, SysError* err) {
  auto bad = [err](const char* why) {
    *err = SysError::FromErrno(EINVAL, "nftBatch", "", why);
    return false;
  };
  if (messages.empty()) return bad("the batch is empty");
  if (messages.size() > kMaxBatchBytes) return bad("the batch is larger than 1 MiB");
  *count = 0;
  for (size_t off = 0; off < messages.size(); (*count)++) {
    if (messages.size() - off < NLMSG_HDRLEN + sizeof(nfgenmsg)) return bad("truncated netlink message");
    nlmsghdr hdr;
    memcpy(&hdr, messages.data() + off, sizeof(hdr));
    size_t len = NLMSG_ALIGN(hdr.nlmsg_len);
    if (hdr.nlmsg_len < NLMSG_HDRLEN + sizeof(nfgenmsg) || len > messages.size() - off) {
      return bad("netlink message length out of range");
    }
    if (!AllowedMessage(hdr.nlmsg_type)) return bad("not a table, chain or rule message");
    off += len;
  }
  return true;
}

// Gives each message its sequence number and asks for an ack of the last one only: errors are
// reported whatever the flags, so one ack tells that the whole batch went through. The first
// message asks for an echo: the kernel reports the commit's generation (nf_tables_gen_notify)
// to the sender when the batch's first message has NLM_F_ECHO. The buffer is exactly the batch
// (no page-sized scratch to clear per pod).
std::vector<char> Frame(const std::vector<char>& messages, size_t count, uint32_t seq, uint32_t* last_seq) {
  // BATCH_BEGIN and BATCH_END are a netlink header and an nfgenmsg each.
  constexpr size_t kControl = NLMSG_ALIGN(sizeof(nlmsghdr) + sizeof(nfgenmsg));
  std::vector<char> framed(messages.size() + 2 * kControl);
  nftnl_batch_begin(framed.data(), seq++);
  size_t at = kControl;
  for (size_t i = 0, off = 0; i < count; i++) {
    auto* src = reinterpret_cast<const nlmsghdr*>(messages.data() + off);
    size_t len = NLMSG_ALIGN(src->nlmsg_len);
    auto* dst = reinterpret_cast<nlmsghdr*>(framed.data() + at);
    memcpy(dst, src, len);
    dst->nlmsg_seq = seq++;
    uint16_t flags = static_cast<uint16_t>(dst->nlmsg_flags & ~(NLM_F_ACK | NLM_F_ECHO));
    dst->nlmsg_flags =
        static_cast<uint16_t>(flags | NLM_F_REQUEST | (i == 0 ? NLM_F_ECHO : 0) | (i + 1 == count ? NLM_F_ACK : 0));
    *last_seq = dst->nlmsg_seq;
    at += len;
    off += len;
  }
  nftnl_batch_end(framed.data() + at, seq++);
  return framed;
}

const char* MessageName(uint16_t type) {
  switch (type & 0xff) {
    case NFT_MSG_NEWTABLE: return "NFT_MSG_NEWTABLE";
    case NFT_MSG_DELRULE: return "NFT_MSG_DELRULE";
    case NFT_MSG_NEWCHAIN: return "NFT_MSG_NEWCHAIN";
    case NFT_MSG_NEWRULE: return "NFT_MSG_NEWRULE";
    default: return "nfnetlink batch";
  }
}

// Reads answers until the last message's ack (or the batch header's error, which the kernel
// sends when it could not even queue errors). The first error names the refused message.
bool ReadBatchAnswer(mnl_socket* sock, const std::vector<char>& framed, uint32_t first_seq, uint32_t last_seq,
                     NftBatchOutcome* outcome, SysError* err) {
  uint32_t port = mnl_socket_get_portid(sock);
  // Acks only (an error ack quotes the refused message): no dump-sized buffer, and not cleared.
  std::unique_ptr<char[]> buf(new char[kAckBufSize]);
  for (;;) {
    ssize_t n = mnl_socket_recvfrom(sock, buf.get(), kAckBufSize);
    if (n < 0) {
      *err = SysError::FromErrno(errno, "recvfrom", "NETLINK_NETFILTER");
      return false;
    }
    int len = static_cast<int>(n);
    for (auto* nlh = reinterpret_cast<const nlmsghdr*>(buf.get()); mnl_nlmsg_ok(nlh, len);
         nlh = mnl_nlmsg_next(nlh, &len)) {
      if (nlh->nlmsg_type == kNftMsg(NFT_MSG_NEWGEN) && nlh->nlmsg_pid == port) {
        outcome->has_generation = NftGenerationOf(nlh, &outcome->generation);
      }
      if (nlh->nlmsg_type != NLMSG_ERROR) continue;
      auto* e = static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(nlh));
      if (e->error != 0 && !outcome->refused) {
        outcome->refused = true;
        // Which message: walk the framed batch to the refused sequence number.
        const char* what = "nfnetlink batch";
        int flen = static_cast<int>(framed.size());
        for (auto* m = reinterpret_cast<const nlmsghdr*>(framed.data()); mnl_nlmsg_ok(m, flen);
             m = mnl_nlmsg_next(m, &flen)) {
          if (m->nlmsg_seq == e->msg.nlmsg_seq) what = MessageName(m->nlmsg_type);
        }
        outcome->refusal =
            SysError::FromErrno(-e->error, "nfnetlink", what, "the kernel refused the prebuilt rules batch");
      }
      if (e->msg.nlmsg_seq == last_seq || e->msg.nlmsg_seq == first_seq) return true;
    }
  }
}

}  // namespace

bool CompileNftTablesBatch(uint8_t family, const std::vector<std::string>& tables, std::vector<char>* out,
                           SysError* err) {
  NetfilterSocket sock;
  if (!sock.Open(err)) return false;
  Dumped d;
  if (!Dump(sock.get(), NFT_MSG_GETTABLE, family, OnTable, &d, err) ||
      !Dump(sock.get(), NFT_MSG_GETCHAIN, family, OnChain, &d, err) ||
      !Dump(sock.get(), NFT_MSG_GETRULE, family, OnRule, &d, err)) {
    return false;
  }
  MessageWriter w(out);
  for (const auto& name : tables) {
    nftnl_table* table = nullptr;
    for (auto& t : d.tables) {
      if (Named(nftnl_table_get_str(t.get(), NFTNL_TABLE_NAME), name)) table = t.get();
    }
    if (!table) {
      *err = SysError::FromErrno(ENOENT, "nftCompile", name, "the table is not in the namespace's ruleset");
      return false;
    }
    WriteTable(&w, family, table);
    for (auto& c : d.chains) {
      if (Named(nftnl_chain_get_str(c.get(), NFTNL_CHAIN_TABLE), name)) WriteChain(&w, family, c.get());
    }
    for (auto& r : d.rules) {
      if (Named(nftnl_rule_get_str(r.get(), NFTNL_RULE_TABLE), name)) WriteRule(&w, family, r.get());
    }
  }
  return true;
}

bool SendNftBatch(const std::vector<char>& messages, NftBatchOutcome* outcome, SysError* err) {
  size_t count = 0;
  if (!CheckMessages(messages, &count, err)) return false;
  NetfilterSocket sock;
  if (!sock.Open(err)) return false;
  uint32_t first_seq = static_cast<uint32_t>(time(nullptr)) << 8;
  uint32_t last_seq = 0;
  std::vector<char> framed = Frame(messages, count, first_seq, &last_seq);
  if (mnl_socket_sendto(sock.get(), framed.data(), framed.size()) < 0) {
    *err = SysError::FromErrno(errno, "sendmsg", "NETLINK_NETFILTER");
    return false;
  }
  if (!ReadBatchAnswer(sock.get(), framed, first_seq, last_seq, outcome, err)) return false;
  if (outcome->refused) outcome->has_generation = false;  // nothing committed
  return true;
}

}  // namespace ana
