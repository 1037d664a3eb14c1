#include "result.h"

#include <arpa/inet.h>

#include <cstdint>
#include <cstdlib>

#include "errors.h"

namespace istio_cni {
namespace {

using nlohmann::ordered_json;

constexpr size_t kMaxIps = 64;
constexpr long long kMaxInterfaceIndex = 0x7fffffff;

std::string Base64(const uint8_t* data, size_t len) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < len; i += 3) {
    uint32_t chunk = static_cast<uint32_t>(data[i]) << 16;
    if (i + 1 < len) chunk |= static_cast<uint32_t>(data[i + 1]) << 8;
    if (i + 2 < len) chunk |= data[i + 2];
    out += kAlphabet[(chunk >> 18) & 63];
    out += kAlphabet[(chunk >> 12) & 63];
    out += i + 1 < len ? kAlphabet[(chunk >> 6) & 63] : '=';
    out += i + 2 < len ? kAlphabet[chunk & 63] : '=';
  }
  return out;
}

[[noreturn]] void Invalid(const std::string& what) {
  throw CniError(kInvalidNetworkConfig, "invalid prevResult: " + what);
}

// Parses an IP literal and prints it back canonically (Go prints net.IP canonically too, so
// "fd00:0::1" reaches the agent as "fd00::1"). Returns the address length in bytes, 0 if invalid.
int CanonicalIp(const std::string& text, std::string* out) {
  unsigned char buf[16];
  char printed[INET6_ADDRSTRLEN];
  // inet_pton reads a C string: JSON's "\u0000" would let "10.0.0.1\u0000junk" pass as 10.0.0.1.
  if (text.find('\0') != std::string::npos) return 0;
  int family = text.find(':') == std::string::npos ? AF_INET : AF_INET6;
  if (inet_pton(family, text.c_str(), buf) != 1) return 0;
  if (!inet_ntop(family, buf, printed, sizeof printed)) return 0;
  *out = printed;
  return family == AF_INET ? 4 : 16;
}

// net.CIDRMask's bytes (4 for IPv4, 16 for IPv6), base64 as Go's JSON writes a []byte.
std::string MaskBase64(int prefix_len, int address_bytes) {
  uint8_t mask[16] = {0};
  for (int i = 0; i < address_bytes; ++i) {
    int bits = prefix_len - i * 8;
    mask[i] = bits >= 8 ? 0xff : bits <= 0 ? 0 : static_cast<uint8_t>(0xff << (8 - bits));
  }
  return Base64(mask, static_cast<size_t>(address_bytes));
}

}  // namespace

std::vector<PodIp> PodIpsFromPrevResult(const PluginConfig& config) {
  std::vector<PodIp> ips;
  if (!config.has_prev_result) return ips;
  auto list = config.prev_result.find("ips");
  if (list == config.prev_result.end() || list->is_null()) return ips;
  if (!list->is_array()) Invalid("\"ips\" must be an array");
  // The agent refuses more (plugin-event-server.ts MAX_IPS); no pod has that many addresses.
  if (list->size() > kMaxIps) Invalid("\"ips\" has more than " + std::to_string(kMaxIps) + " entries");
  for (const auto& entry : *list) {
    if (!entry.is_object()) Invalid("\"ips\" entries must be objects");
    PodIp ip;

    auto addr = entry.find("address");
    if (addr == entry.end() || !addr->is_string()) Invalid("ips[].address must be a CIDR string");
    const std::string cidr = addr->get<std::string>();
    size_t slash = cidr.find('/');
    if (slash == std::string::npos) Invalid("address \"" + cidr + "\" is not a CIDR");
    int bytes = CanonicalIp(cidr.substr(0, slash), &ip.ip);
    if (bytes == 0) Invalid("address \"" + cidr + "\" has an invalid IP");
    const std::string prefix = cidr.substr(slash + 1);
    // Digits only (no sign, space or NUL), at most 3 of them.
    const bool digits =
        !prefix.empty() && prefix.size() <= 3 && prefix.find_first_not_of("0123456789") == std::string::npos;
    long prefix_len = digits ? strtol(prefix.c_str(), nullptr, 10) : -1;
    if (!digits || prefix_len > bytes * 8) {
      Invalid("address \"" + cidr + "\" has an invalid prefix length");
    }
    ip.mask_base64 = MaskBase64(static_cast<int>(prefix_len), bytes);

    auto gw = entry.find("gateway");
    if (gw != entry.end() && !gw->is_null()) {
      if (!gw->is_string() || CanonicalIp(gw->get<std::string>(), &ip.gateway) == 0)
        Invalid("ips[].gateway must be an IP address");
    }

    auto iface = entry.find("interface");
    if (iface != entry.end() && !iface->is_null()) {
      // An index into "interfaces": bounded so that it also survives JSON readers that use doubles.
      if (!iface->is_number_integer() || iface->get<long long>() < 0 || iface->get<long long>() > kMaxInterfaceIndex) {
        Invalid("ips[].interface must be a non-negative integer below 2^31");
      }
      ip.interface_index = iface->get<long long>();
    }
    ips.push_back(std::move(ip));
  }
  return ips;
}

ordered_json ResultToPrint(const PluginConfig& config) {
  if (!config.has_prev_result) {
    // What the Go CNI library prints for an empty current result: DNS is not omitempty.
    ordered_json empty;
    empty["cniVersion"] = config.cni_version;
    empty["dns"] = ordered_json::object();
    return empty;
  }
  ordered_json out = config.prev_result;
  // Runtimes send prevResult in the config's version, so only the version stamp is ours to set
  // (it is also what the runtime checks the reply against).
  out["cniVersion"] = config.cni_version;
  return out;
}

}  // namespace istio_cni
