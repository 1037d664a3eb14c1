#include "ipset.h"

#include <arpa/inet.h>
#include <errno.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/ipset/ip_set.h>
#include <linux/netfilter/nfnetlink.h>
#include <sys/socket.h>
#include <time.h>

#include <vector>

#include "nfnl_socket.h"

namespace ana {
namespace {

constexpr size_t kBufSize = 65536;
// What vishvananda/netlink (Istio's library) sends: the oldest protocol every kernel with
// comment support accepts.
constexpr uint8_t kProtocol = IPSET_PROTOCOL_MIN;
// hash:ip with comments: the revision vishvananda/netlink v1.3.1 picks (getIpsetDefaultRevision),
// so a set we create is the set Istio's agent creates.
constexpr uint8_t kHashIpCommentRevision = 2;

const char* CommandName(uint8_t cmd) {
  switch (cmd) {
    case IPSET_CMD_CREATE: return "IPSET_CMD_CREATE";
    case IPSET_CMD_DESTROY: return "IPSET_CMD_DESTROY";
    case IPSET_CMD_FLUSH: return "IPSET_CMD_FLUSH";
    case IPSET_CMD_LIST: return "IPSET_CMD_LIST";
    case IPSET_CMD_ADD: return "IPSET_CMD_ADD";
    case IPSET_CMD_DEL: return "IPSET_CMD_DEL";
    default: return "IPSET_CMD";
  }
}

// ipset's private error numbers (>= 4096) are not errnos: each becomes the closest errno, with
// the ipset meaning in the detail.
SysError KernelError(int kernel_errno, uint8_t cmd, const std::string& set) {
  switch (kernel_errno) {
    case IPSET_ERR_EXIST:
      return SysError::FromErrno(EEXIST, "nfnetlink", set,
                                 std::string(CommandName(cmd)) + ": element or set exists / is missing");
    case IPSET_ERR_TYPE_MISMATCH:
      return SysError::FromErrno(EINVAL, "nfnetlink", set, "a set of this name exists with another type");
    case IPSET_ERR_PROTOCOL:
      return SysError::FromErrno(EPROTONOSUPPORT, "nfnetlink", set, "the kernel's ipset protocol is not supported");
    case IPSET_ERR_FIND_TYPE:
      return SysError::FromErrno(EOPNOTSUPP, "nfnetlink", set,
                                 "the kernel has no hash:ip set type (ip_set_hash_ip module)");
    case IPSET_ERR_COMMENT: return SysError::FromErrno(EINVAL, "nfnetlink", set, "the set has no comment support");
    case IPSET_ERR_REFERENCED:
      return SysError::FromErrno(EBUSY, "nfnetlink", set, "the set is in use by a kernel component (an iptables rule)");
    default: break;
  }
  if (kernel_errno >= IPSET_ERR_PRIVATE) {
    return SysError::FromErrno(EINVAL, "nfnetlink", set, "ipset error " + std::to_string(kernel_errno));
  }
  return SysError::FromErrno(kernel_errno, "nfnetlink", set, CommandName(cmd));
}

nlmsghdr* PutHeader(char* buf, uint8_t cmd, uint16_t flags, uint8_t family, uint32_t seq) {
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = static_cast<uint16_t>((NFNL_SUBSYS_IPSET << 8) | cmd);
  nlh->nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
  nlh->nlmsg_seq = seq;
  auto* nfg = static_cast<nfgenmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg)));
  nfg->nfgen_family = family;
  nfg->version = NFNETLINK_V0;
  nfg->res_id = 0;
  mnl_attr_put_u8(nlh, IPSET_ATTR_PROTOCOL, kProtocol);
  return nlh;
}

class Request {
 public:
  Request(uint8_t cmd, uint16_t flags, uint8_t family, const std::string& set)
      : buf_(kBufSize), cmd_(cmd), set_(set), seq_(static_cast<uint32_t>(time(nullptr))) {
    nlh_ = PutHeader(buf_.data(), cmd, flags, family, seq_);
    mnl_attr_put_strz(nlh_, IPSET_ATTR_SETNAME, set.c_str());
  }

  nlmsghdr* nlh() { return nlh_; }

  // Sends the request and runs `cb` on every answer until the ack (or NLMSG_DONE). The kernel's
  // errno goes to *kernel_errno (0 on success); *err is set only for socket failures.
  bool Run(mnl_cb_t cb, void* data, int* kernel_errno, SysError* err) {
    NetfilterSocket sock;
    if (!sock.Open(err)) return false;
    if (mnl_socket_sendto(sock.get(), nlh_, nlh_->nlmsg_len) < 0) {
      *err = SysError::FromErrno(errno, "sendto", "NETLINK_NETFILTER");
      return false;
    }
    std::vector<char> reply(kBufSize);
    *kernel_errno = 0;
    for (;;) {
      ssize_t n = mnl_socket_recvfrom(sock.get(), reply.data(), reply.size());
      if (n < 0) {
        *err = SysError::FromErrno(errno, "recvfrom", "NETLINK_NETFILTER");
        return false;
      }
      int rc = mnl_cb_run(reply.data(), static_cast<size_t>(n), seq_, sock.port_id(), cb, data);
      if (rc == MNL_CB_ERROR) {
        *kernel_errno = errno == 0 ? EPROTO : errno;
        return true;
      }
      if (rc == MNL_CB_STOP) return true;
    }
  }

  // Run() for a command whose only answer is the ack; an error the caller does not expect
  // becomes *err.
  bool RunAck(int tolerated, bool* hit_tolerated, SysError* err) {
    int kernel_errno = 0;
    if (!Run(nullptr, nullptr, &kernel_errno, err)) return false;
    if (hit_tolerated) *hit_tolerated = kernel_errno != 0 && kernel_errno == tolerated;
    if (kernel_errno == 0 || kernel_errno == tolerated) return true;
    *err = KernelError(kernel_errno, cmd_, set_);
    return false;
  }

  uint8_t cmd() const { return cmd_; }
  const std::string& set() const { return set_; }

 private:
  std::vector<char> buf_;
  nlmsghdr* nlh_ = nullptr;
  uint8_t cmd_;
  std::string set_;
  uint32_t seq_;
};

bool ParseIp(const std::string& text, int* family, unsigned char* bytes) {
  if (inet_pton(AF_INET, text.c_str(), bytes) == 1) {
    *family = AF_INET;
    return true;
  }
  if (inet_pton(AF_INET6, text.c_str(), bytes) == 1) {
    *family = AF_INET6;
    return true;
  }
  return false;
}

// DATA { IP { IPADDR_IPVx }, [COMMENT], LINENO 0 }: the element as vishvananda/netlink sends it.
bool PutElement(nlmsghdr* nlh, const std::string& set, const std::string& ip, const std::string* comment,
                SysError* err) {
  unsigned char bytes[16];
  int family = 0;
  if (!ParseIp(ip, &family, bytes)) {
    *err = SysError::FromErrno(EINVAL, "inet_pton", set, "not an IP address: " + ip);
    return false;
  }
  nlattr* data = mnl_attr_nest_start(nlh, IPSET_ATTR_DATA);
  if (comment && !comment->empty()) mnl_attr_put_strz(nlh, IPSET_ATTR_COMMENT, comment->c_str());
  nlattr* addr = mnl_attr_nest_start(nlh, IPSET_ATTR_IP);
  uint16_t type = family == AF_INET ? IPSET_ATTR_IPADDR_IPV4 : IPSET_ATTR_IPADDR_IPV6;
  mnl_attr_put(nlh, static_cast<uint16_t>(type | NLA_F_NET_BYTEORDER), family == AF_INET ? 4 : 16, bytes);
  mnl_attr_nest_end(nlh, addr);
  mnl_attr_put_u32(nlh, static_cast<uint16_t>(IPSET_ATTR_LINENO | NLA_F_NET_BYTEORDER), 0);
  mnl_attr_nest_end(nlh, data);
  return true;
}

// ---- parsing a LIST dump ----

// Calls fn(attr) for each attribute in [begin, begin + len) (libmnl's iteration macros rely on
// C's implicit void* conversions).
template <typename Fn>
void ForEachAttr(const void* begin, size_t len, Fn fn) {
  auto* a = static_cast<const nlattr*>(begin);
  int remaining = static_cast<int>(len);
  while (mnl_attr_ok(a, remaining)) {
    fn(a);
    const nlattr* next = mnl_attr_next(a);
    remaining -= static_cast<int>(reinterpret_cast<const char*>(next) - reinterpret_cast<const char*>(a));
    a = next;
  }
}

template <typename Fn>
void ForEachNested(const nlattr* nest, Fn fn) {
  ForEachAttr(mnl_attr_get_payload(nest), mnl_attr_get_payload_len(nest), fn);
}

std::string AttrString(const nlattr* a) {
  const char* p = static_cast<const char*>(mnl_attr_get_payload(a));
  size_t len = mnl_attr_get_payload_len(a);
  while (len > 0 && p[len - 1] == '\0') len--;
  return std::string(p, len);
}

std::string ParseAddress(const nlattr* nested) {
  std::string out;
  ForEachNested(nested, [&](const nlattr* a) {
    uint16_t type = mnl_attr_get_type(a);
    size_t len = mnl_attr_get_payload_len(a);
    char text[INET6_ADDRSTRLEN] = "";
    if (type == IPSET_ATTR_IPADDR_IPV4 && len == 4) inet_ntop(AF_INET, mnl_attr_get_payload(a), text, sizeof(text));
    if (type == IPSET_ATTR_IPADDR_IPV6 && len == 16) inet_ntop(AF_INET6, mnl_attr_get_payload(a), text, sizeof(text));
    if (out.empty() && text[0] != '\0') out = text;
  });
  return out;
}

void ParseEntries(const nlattr* adt, IpsetListing* out) {
  ForEachNested(adt, [&](const nlattr* data) {
    if (mnl_attr_get_type(data) != IPSET_ATTR_DATA) return;
    IpsetEntry entry;
    ForEachNested(data, [&](const nlattr* a) {
      uint16_t type = mnl_attr_get_type(a);
      if (type == IPSET_ATTR_IP) entry.ip = ParseAddress(a);
      if (type == IPSET_ATTR_COMMENT) entry.comment = AttrString(a);
    });
    if (!entry.ip.empty()) out->entries.push_back(std::move(entry));
  });
}

void ParseHeaderData(const nlattr* nested, IpsetListing* out) {
  ForEachNested(nested, [&](const nlattr* a) {
    if (mnl_attr_get_type(a) == IPSET_ATTR_CADT_FLAGS && mnl_attr_get_payload_len(a) == 4) {
      out->comments = (ntohl(mnl_attr_get_u32(a)) & IPSET_FLAG_WITH_COMMENT) != 0;
    }
  });
}

int ListCallback(const nlmsghdr* nlh, void* data) {
  auto* out = static_cast<IpsetListing*>(data);
  out->exists = true;
  const void* begin = mnl_nlmsg_get_payload_offset(nlh, sizeof(nfgenmsg));
  size_t len =
      static_cast<size_t>(static_cast<const char*>(mnl_nlmsg_get_payload_tail(nlh)) - static_cast<const char*>(begin));
  ForEachAttr(begin, len, [&](const nlattr* a) {
    switch (mnl_attr_get_type(a)) {
      case IPSET_ATTR_TYPENAME: out->type_name = AttrString(a); break;
      case IPSET_ATTR_FAMILY:
        if (mnl_attr_get_payload_len(a) == 1) out->family = mnl_attr_get_u8(a) == NFPROTO_IPV6 ? AF_INET6 : AF_INET;
        break;
      case IPSET_ATTR_REVISION:
        if (mnl_attr_get_payload_len(a) == 1) out->revision = mnl_attr_get_u8(a);
        break;
      case IPSET_ATTR_DATA: ParseHeaderData(a, out); break;
      case IPSET_ATTR_ADT: ParseEntries(a, out); break;
      default: break;
    }
  });
  return MNL_CB_OK;
}

bool CheckName(const std::string& name, SysError* err) {
  if (!name.empty() && name.size() <= kMaxIpsetName && name.find('\0') == std::string::npos) return true;
  *err = SysError::FromErrno(EINVAL, "ipset", name, "set names are 1-31 bytes without NUL");
  return false;
}

}  // namespace

bool IpsetCreateHashIp(const std::string& name, int family, bool* incompatible, SysError* err) {
  if (!CheckName(name, err)) return false;
  // No NLM_F_EXCL (Istio's Replace: true): the kernel accepts an existing compatible set.
  Request req(IPSET_CMD_CREATE, NLM_F_ACK | NLM_F_CREATE, NFPROTO_IPV4, name);
  mnl_attr_put_strz(req.nlh(), IPSET_ATTR_TYPENAME, "hash:ip");
  mnl_attr_put_u8(req.nlh(), IPSET_ATTR_REVISION, kHashIpCommentRevision);
  mnl_attr_put_u8(req.nlh(), IPSET_ATTR_FAMILY, family == AF_INET6 ? NFPROTO_IPV6 : NFPROTO_IPV4);
  nlattr* data = mnl_attr_nest_start(req.nlh(), IPSET_ATTR_DATA);
  mnl_attr_put_u32(req.nlh(), static_cast<uint16_t>(IPSET_ATTR_CADT_FLAGS | NLA_F_NET_BYTEORDER),
                   htonl(IPSET_FLAG_WITH_COMMENT));
  mnl_attr_nest_end(req.nlh(), data);
  // A set of that name that differs (no comments, other sizes) answers IPSET_ERR_EXIST: Istio
  // ignores it too and keeps the set; IpsetList shows what it is.
  int kernel_errno = 0;
  if (!req.Run(nullptr, nullptr, &kernel_errno, err)) return false;
  *incompatible = kernel_errno == EEXIST || kernel_errno == IPSET_ERR_EXIST;
  if (kernel_errno == 0 || *incompatible) return true;
  *err = KernelError(kernel_errno, IPSET_CMD_CREATE, name);
  return false;
}

bool IpsetDestroy(const std::string& name, SysError* err) {
  if (!CheckName(name, err)) return false;
  Request req(IPSET_CMD_DESTROY, NLM_F_ACK, NFPROTO_IPV4, name);
  return req.RunAck(0, nullptr, err);
}

bool IpsetFlush(const std::string& name, SysError* err) {
  if (!CheckName(name, err)) return false;
  Request req(IPSET_CMD_FLUSH, NLM_F_ACK, NFPROTO_IPV4, name);
  return req.RunAck(0, nullptr, err);
}

bool IpsetList(const std::string& name, IpsetListing* out, SysError* err) {
  if (!CheckName(name, err)) return false;
  *out = IpsetListing{};
  Request req(IPSET_CMD_LIST, NLM_F_DUMP | NLM_F_ACK, NFPROTO_IPV4, name);
  int kernel_errno = 0;
  if (!req.Run(ListCallback, out, &kernel_errno, err)) return false;
  if (kernel_errno == ENOENT) {
    *out = IpsetListing{};
    return true;
  }
  if (kernel_errno != 0) {
    *err = KernelError(kernel_errno, IPSET_CMD_LIST, name);
    return false;
  }
  return true;
}

bool IpsetAdd(const std::string& name, const std::string& ip, const std::string& comment, bool replace, SysError* err) {
  if (!CheckName(name, err)) return false;
  if (comment.size() > kMaxIpsetComment) {
    *err = SysError::FromErrno(EINVAL, "ipset", name, "comments are at most 255 bytes");
    return false;
  }
  Request req(IPSET_CMD_ADD, static_cast<uint16_t>(NLM_F_ACK | (replace ? 0 : NLM_F_EXCL)), NFPROTO_IPV4, name);
  if (!PutElement(req.nlh(), name, ip, &comment, err)) return false;
  return req.RunAck(0, nullptr, err);
}

bool IpsetDel(const std::string& name, const std::string& ip, bool* changed, SysError* err) {
  if (!CheckName(name, err)) return false;
  // NLM_F_EXCL, as vishvananda/netlink sends a delete: an absent element answers IPSET_ERR_EXIST.
  Request req(IPSET_CMD_DEL, NLM_F_ACK | NLM_F_EXCL, NFPROTO_IPV4, name);
  if (!PutElement(req.nlh(), name, ip, nullptr, err)) return false;
  bool absent = false;
  if (!req.RunAck(IPSET_ERR_EXIST, &absent, err)) return false;
  *changed = !absent;
  return true;
}

}  // namespace ana
