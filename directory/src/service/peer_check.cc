#include "service/peer_check.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <array>
#include <cstring>
#include <optional>
#include <string>

namespace tocl::directory {
namespace {

// An IP as 16 bytes (IPv4 as v4-mapped IPv6), so that "10.0.0.2" and
// "::ffff:10.0.0.2" compare equal.
using IpBytes = std::array<unsigned char, 16>;

std::optional<IpBytes> ParseIp(std::string_view text) {
  const std::string ip(text);
  IpBytes bytes{};
  in_addr v4{};
  if (::inet_pton(AF_INET, ip.c_str(), &v4) == 1) {
    bytes[10] = 0xff;
    bytes[11] = 0xff;
    std::memcpy(bytes.data() + 12, &v4, 4);
    return bytes;
  }
  in6_addr v6{};
  if (::inet_pton(AF_INET6, ip.c_str(), &v6) == 1) {
    std::memcpy(bytes.data(), &v6, 16);
    return bytes;
  }
  return std::nullopt;
}

// The IP part of "ipv4:1.2.3.4:5", "ipv6:[::1]:5", "ipv6:%5B::1%5D:5"
// (newer gRPC escapes the brackets), "1.2.3.4:5" or "[::1]:5".
std::optional<IpBytes> IpOf(std::string_view address) {
  for (std::string_view scheme : {"ipv4:", "ipv6:"}) {
    if (address.starts_with(scheme)) address.remove_prefix(scheme.size());
  }
  std::string_view ip;
  if (address.starts_with("[")) {
    ip = address.substr(1, address.find(']') - 1);
  } else if (address.starts_with("%5B") || address.starts_with("%5b")) {
    address.remove_prefix(3);
    size_t end = address.find('%');
    ip = address.substr(0, end);
  } else {
    size_t colon = address.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    ip = address.substr(0, colon);
  }
  // A zone ("fe80::1%eth0") is not part of the address compared.
  ip = ip.substr(0, ip.find('%'));
  return ParseIp(ip);
}

}  // namespace

bool SameIp(std::string_view peer, std::string_view address) {
  std::optional<IpBytes> a = IpOf(peer);
  std::optional<IpBytes> b = IpOf(address);
  return a && b && *a == *b;
}

Status CheckTrustedPeer(std::string_view peer, bool authenticated,
                        std::span<const MemberRow> members, std::string_view what) {
  if (peer.starts_with("unix:") || authenticated) return Status::Ok();
  for (const MemberRow& member : members) {
    if (!member.address.empty() && SameIp(peer, member.address)) return Status::Ok();
  }
  return PermissionDenied(fmt::format(
      "{} requests are accepted only from this host's unix socket and from the cluster's daemons "
      "(and, on a daemon with credentials, from clients with the cluster's certificate); {} is "
      "neither",
      what, peer));
}

}  // namespace tocl::directory
