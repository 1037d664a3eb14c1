#include "nft_tables.h"

#include <arpa/inet.h>
#include <errno.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <sys/socket.h>
#include <time.h>

#include <atomic>
#include <vector>

#include "nfnl_socket.h"

namespace ana {
namespace {

constexpr size_t kBufSize = 32768;

nlmsghdr* PutMessage(mnl_nlmsg_batch* batch, uint16_t type, uint16_t flags, uint8_t family, uint16_t res_id,
                     uint32_t seq) {
  nlmsghdr* nlh = mnl_nlmsg_put_header(mnl_nlmsg_batch_current(batch));
  nlh->nlmsg_type = type;
  nlh->nlmsg_flags = NLM_F_REQUEST | flags;
  nlh->nlmsg_seq = seq;
  auto* nfg = static_cast<nfgenmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg)));
  nfg->nfgen_family = family;
  nfg->version = NFNETLINK_V0;
  nfg->res_id = htons(res_id);
  return nlh;
}

void PutTableMessage(mnl_nlmsg_batch* batch, int msg, uint16_t flags, uint8_t family, const std::string& table,
                     uint32_t seq) {
  nlmsghdr* nlh =
      PutMessage(batch, static_cast<uint16_t>((NFNL_SUBSYS_NFTABLES << 8) | msg), flags | NLM_F_ACK, family, 0, seq);
  mnl_attr_put_strz(nlh, NFTA_TABLE_NAME, table.c_str());
  mnl_nlmsg_batch_next(batch);
}

// Reads acknowledgements until `expected` arrived; the first kernel error wins.
bool ReadAcks(mnl_socket* sock, size_t expected, SysError* err) {
  std::vector<char> buf(kBufSize);
  int kernel_errno = 0;
  for (size_t acked = 0; acked < expected;) {
    ssize_t n = mnl_socket_recvfrom(sock, buf.data(), buf.size());
    if (n < 0) {
      *err = SysError::FromErrno(errno, "recvfrom", "NETLINK_NETFILTER");
      return false;
    }
    int len = static_cast<int>(n);
    for (auto* nlh = reinterpret_cast<const nlmsghdr*>(buf.data()); mnl_nlmsg_ok(nlh, len);
         nlh = mnl_nlmsg_next(nlh, &len)) {
      if (nlh->nlmsg_type != NLMSG_ERROR) continue;
      acked++;
      auto* e = static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(nlh));
      // An aborted batch answers only the failing message: stop at the first error.
      if (e->error != 0) {
        kernel_errno = -e->error;
        acked = expected;
        break;
      }
    }
  }
  if (kernel_errno != 0) {
    *err =
        SysError::FromErrno(kernel_errno, "nfnetlink", "NFT_MSG_DELTABLE", "the kernel refused the table delete batch");
    return false;
  }
  return true;
}

}  // namespace

bool NftFamilyFromName(const std::string& name, uint8_t* family) {
  if (name == "inet")
    *family = NFPROTO_INET;
  else if (name == "ip")
    *family = NFPROTO_IPV4;
  else if (name == "ip6")
    *family = NFPROTO_IPV6;
  else
    return false;
  return true;
}

bool DeleteNftTables(uint8_t family, const std::vector<std::string>& tables, SysError* err) {
  if (tables.empty()) return true;
  NetfilterSocket sock;
  if (!sock.Open(err)) return false;
  std::vector<char> buf(kBufSize);
  mnl_nlmsg_batch* batch = mnl_nlmsg_batch_start(buf.data(), buf.size());
  uint32_t seq = static_cast<uint32_t>(time(nullptr));
  PutMessage(batch, NFNL_MSG_BATCH_BEGIN, 0, AF_UNSPEC, NFNL_SUBSYS_NFTABLES, seq++);
  mnl_nlmsg_batch_next(batch);
  for (const auto& table : tables) {
    PutTableMessage(batch, NFT_MSG_NEWTABLE, NLM_F_CREATE, family, table, seq++);
    PutTableMessage(batch, NFT_MSG_DELTABLE, 0, family, table, seq++);
  }
  PutMessage(batch, NFNL_MSG_BATCH_END, 0, AF_UNSPEC, NFNL_SUBSYS_NFTABLES, seq++);
  mnl_nlmsg_batch_next(batch);
  bool sent = mnl_socket_sendto(sock.get(), mnl_nlmsg_batch_head(batch), mnl_nlmsg_batch_size(batch)) >= 0;
  int send_errno = errno;
  mnl_nlmsg_batch_stop(batch);
  if (!sent) {
    *err = SysError::FromErrno(send_errno, "sendto", "NETLINK_NETFILTER");
    return false;
  }
  return ReadAcks(sock.get(), 2 * tables.size(), err);
}

}  // namespace ana

namespace ana {

bool NftGenerationOf(const nlmsghdr* newgen, uint32_t* generation) {
  auto* attr = static_cast<const nlattr*>(mnl_nlmsg_get_payload_offset(newgen, sizeof(nfgenmsg)));
  auto* tail = static_cast<const char*>(mnl_nlmsg_get_payload_tail(newgen));
  for (; mnl_attr_ok(attr, static_cast<int>(tail - reinterpret_cast<const char*>(attr))); attr = mnl_attr_next(attr)) {
    if (mnl_attr_get_type(attr) == NFTA_GEN_ID && mnl_attr_get_payload_len(attr) == sizeof(uint32_t)) {
      *generation = ntohl(mnl_attr_get_u32(attr));
      return true;
    }
  }
  return false;
}

bool NftGeneration(uint32_t* generation, SysError* err) {
  NetfilterSocket sock;
  if (!sock.Open(err)) return false;
  return QueryNftGeneration(mnl_socket_get_fd(sock.get()), generation, err);
}

bool QueryNftGeneration(int fd, uint32_t* generation, SysError* err) {
  // Per process, not per socket: a reply left on a watch socket by an earlier failed query
  // carries another number and is skipped.
  static std::atomic<uint32_t> next_seq{static_cast<uint32_t>(time(nullptr))};
  uint32_t seq = next_seq++;
  // The answer is one small NEWGEN message: a stack buffer, not a cleared 32 KiB one per call.
  alignas(nlmsghdr) char buf[MNL_SOCKET_BUFFER_SIZE];
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETGEN;
  nlh->nlmsg_flags = NLM_F_REQUEST;
  nlh->nlmsg_seq = seq;
  auto* nfg = static_cast<nfgenmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg)));
  nfg->nfgen_family = AF_UNSPEC;
  nfg->version = NFNETLINK_V0;
  nfg->res_id = 0;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd, nlh, nlh->nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0) {
    *err = SysError::FromErrno(errno, "sendto", "NETLINK_NETFILTER");
    return false;
  }
  // The kernel answers inside sendto, so a non-blocking socket has the answer queued already.
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno == EAGAIN || errno == EWOULDBLOCK ? ETIMEDOUT : errno;
      *err = SysError::FromErrno(e, "recv", "NETLINK_NETFILTER", "no answer to NFT_MSG_GETGEN");
      return false;
    }
    int len = static_cast<int>(n);
    for (auto* m = reinterpret_cast<const nlmsghdr*>(buf); mnl_nlmsg_ok(m, len); m = mnl_nlmsg_next(m, &len)) {
      if (m->nlmsg_seq != seq) continue;
      if (m->nlmsg_type == NLMSG_ERROR) {
        auto* e = static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(m));
        *err = SysError::FromErrno(e->error ? -e->error : EPROTO, "nfnetlink", "NFT_MSG_GETGEN");
        return false;
      }
      if (m->nlmsg_type == ((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWGEN) && NftGenerationOf(m, generation))
        return true;
      *err = SysError::FromErrno(EPROTO, "nfnetlink", "NFT_MSG_GETGEN", "no generation in the kernel's answer");
      return false;
    }
    // Only answers to earlier queries in this datagram: read on.
  }
}

}  // namespace ana
