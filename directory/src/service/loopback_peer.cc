#include "service/loopback_peer.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <array>
#include <charconv>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>

namespace tocl::directory {
namespace {

// An IP as 16 bytes (IPv4 as v4-mapped IPv6), and a port.
struct SocketAddress {
  std::array<unsigned char, 16> ip{};
  uint16_t port = 0;

  bool v4_mapped() const {
    static constexpr unsigned char kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return std::memcmp(ip.data(), kPrefix, sizeof(kPrefix)) == 0;
  }
};

std::optional<SocketAddress> ParsePeer(std::string_view peer) {
  for (std::string_view scheme : {"ipv4:", "ipv6:"}) {
    if (peer.starts_with(scheme)) peer.remove_prefix(scheme.size());
  }
  std::string_view ip, port;
  if (peer.starts_with("[")) {
    const size_t end = peer.find("]:");
    if (end == std::string_view::npos) return std::nullopt;
    ip = peer.substr(1, end - 1);
    port = peer.substr(end + 2);
  } else if (peer.starts_with("%5B") || peer.starts_with("%5b")) {
    const size_t end = peer.find('%', 3);
    if (end == std::string_view::npos || peer.substr(end, 4).size() < 4) return std::nullopt;
    ip = peer.substr(3, end - 3);
    port = peer.substr(end + 4);
  } else {
    const size_t colon = peer.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    ip = peer.substr(0, colon);
    port = peer.substr(colon + 1);
  }
  ip = ip.substr(0, ip.find('%'));  // a zone is not part of the address
  SocketAddress address;
  const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), address.port);
  if (error != std::errc() || end != port.data() + port.size()) return std::nullopt;
  const std::string text(ip);
  in_addr v4{};
  in6_addr v6{};
  if (::inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    address.ip[10] = address.ip[11] = 0xff;
    std::memcpy(address.ip.data() + 12, &v4, 4);
  } else if (::inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    std::memcpy(address.ip.data(), &v6, 16);
  } else {
    return std::nullopt;
  }
  return address;
}

// The kernel prints each 32-bit word of an address as the number it is in
// memory ("%08X", so 127.0.0.1 is 0100007F on little-endian machines), and
// the port in host order.
std::string Word(const unsigned char* bytes) {
  uint32_t word = 0;
  std::memcpy(&word, bytes, 4);
  return fmt::format("{:08X}", word);
}

// How `address` reads in /proc/net/tcp6 and /proc/net/tcp ("" when it has
// no IPv4 form).
std::string Tcp6Text(const SocketAddress& address) {
  std::string text;
  for (size_t i = 0; i < 16; i += 4) text += Word(address.ip.data() + i);
  return fmt::format("{}:{:04X}", text, address.port);
}
std::string TcpText(const SocketAddress& address) {
  if (!address.v4_mapped()) return "";
  return fmt::format("{}:{:04X}", Word(address.ip.data() + 12), address.port);
}

// The uids owning established sockets whose local address is `local` in
// the table at `path`.
void CollectOwners(const char* path, const std::string& local, std::set<uid_t>& owners) {
  if (local.empty()) return;
  std::ifstream table(path);
  std::string line;
  std::getline(table, line);  // the header
  constexpr std::string_view kEstablished = "01";
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local_address, remote_address, state, queues, timer, retransmits;
    uid_t uid = 0;
    if (!(fields >> slot >> local_address >> remote_address >> state >> queues >> timer >>
          retransmits >> uid)) {
      continue;
    }
    if (local_address == local && state == kEstablished) owners.insert(uid);
  }
}

}  // namespace

Result<uid_t> LoopbackPeerUid(std::string_view peer) {
  const std::optional<SocketAddress> address = ParsePeer(peer);
  if (!address) return PermissionDenied(fmt::format("cannot read the TCP peer '{}'", peer));
  std::set<uid_t> owners;
  // gRPC's sockets are often IPv6 ones carrying IPv4 (v4-mapped): both tables.
  CollectOwners("/proc/net/tcp", TcpText(*address), owners);
  CollectOwners("/proc/net/tcp6", Tcp6Text(*address), owners);
  if (owners.size() == 1) return *owners.begin();
  if (owners.empty()) {
    return PermissionDenied(fmt::format(
        "the TCP peer {} is not a connected socket of this host, so its user is unknown", peer));
  }
  return PermissionDenied(fmt::format(
      "sockets of several users have the TCP peer's address {}, so its user is unknown", peer));
}

}  // namespace tocl::directory
