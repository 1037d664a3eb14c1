// The kernel's ip sets (the `ipset` tool's objects) through raw nfnetlink messages (libmnl),
// exactly as Istio's agent writes them through vishvananda/netlink: `hash:ip` sets, one per
// family, created with comment support, elements carrying the pod UID as their comment. No
// `ipset` binary and no libipset: a handful of messages, built and parsed here.
#pragma once

#include <stdint.h>

#include <string>
#include <vector>

#include "sys_error.h"

namespace ana {

// IPSET_MAXNAMELEN is 32 with the terminating NUL; comments are at most 255 bytes.
constexpr size_t kMaxIpsetName = 31;
constexpr size_t kMaxIpsetComment = 255;

struct IpsetEntry {
  std::string ip;       // textual address
  std::string comment;  // "" without one
};

struct IpsetListing {
  bool exists = false;
  std::string type_name;
  int family = 0;  // AF_INET or AF_INET6
  unsigned revision = 0;
  bool comments = false;  // created with comment support
  std::vector<IpsetEntry> entries;
};

// Each call opens its own socket in the calling thread's namespace. No call uses NLM_F_EXCL
// except delete (as vishvananda/netlink): creating a set that exists identically and
// destroying a missing one succeed.
// *incompatible: a set of that name exists with other parameters (no comments, other sizes);
// it is kept, as Istio keeps it.
bool IpsetCreateHashIp(const std::string& name, int family, bool* incompatible, SysError* err);
bool IpsetDestroy(const std::string& name, SysError* err);
bool IpsetFlush(const std::string& name, SysError* err);
bool IpsetList(const std::string& name, IpsetListing* out, SysError* err);
// `replace`: an element already present gets the new comment (Istio adds with Replace=true).
bool IpsetAdd(const std::string& name, const std::string& ip, const std::string& comment, bool replace, SysError* err);
// *changed is false when the element was not in the set.
bool IpsetDel(const std::string& name, const std::string& ip, bool* changed, SysError* err);

}  // namespace ana
