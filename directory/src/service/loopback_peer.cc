#include "service/loopback_peer.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>

#include "core/parse_number.h"

namespace tocl::directory {
namespace {

constexpr unsigned char kV4MappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

std::optional<TcpEndpoint> FromIpText(std::string_view ip, uint16_t port) {
  const std::string text(ip.substr(0, ip.find('%')));  // a zone is not part of the address
  TcpEndpoint address;
  address.port = port;
  in_addr v4{};
  in6_addr v6{};
  if (::inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    std::memcpy(address.ip.data(), kV4MappedPrefix, sizeof(kV4MappedPrefix));
    std::memcpy(address.ip.data() + 12, &v4, 4);
  } else if (::inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    std::memcpy(address.ip.data(), &v6, 16);
  } else {
    return std::nullopt;
  }
  return address;
}

// "0100007F:1F90" (tcp) or 32 hex digits and a port (tcp6). The kernel
// prints each 32-bit word of an address as the number it is in memory
// ("%08X": 127.0.0.1 is 0100007F on little-endian machines), the port in
// host order.
std::optional<TcpEndpoint> ParseTableAddress(std::string_view text) {
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const std::string_view ip = text.substr(0, colon);
  const std::optional<uint16_t> port = ParseNumber<uint16_t>(text.substr(colon + 1), 16);
  if (!port || (ip.size() != 8 && ip.size() != 32)) return std::nullopt;
  TcpEndpoint address;
  address.port = *port;
  const bool v4 = ip.size() == 8;
  if (v4) std::memcpy(address.ip.data(), kV4MappedPrefix, sizeof(kV4MappedPrefix));
  for (size_t word = 0; word < ip.size() / 8; ++word) {
    const std::optional<uint32_t> value = ParseNumber<uint32_t>(ip.substr(word * 8, 8), 16);
    if (!value) return std::nullopt;
    std::memcpy(address.ip.data() + (v4 ? 12 : word * 4), &*value, 4);
  }
  return address;
}

}  // namespace

bool TcpEndpoint::v4_mapped() const {
  return std::memcmp(ip.data(), kV4MappedPrefix, sizeof(kV4MappedPrefix)) == 0;
}

bool TcpEndpoint::unspecified() const {
  const std::array<unsigned char, 16> zero{};
  if (ip == zero) return true;
  return v4_mapped() && std::memcmp(ip.data() + 12, zero.data(), 4) == 0;
}

std::optional<TcpEndpoint> ParseGrpcPeer(std::string_view peer) {
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
    if (end == std::string_view::npos || peer.substr(end).size() < 4) return std::nullopt;
    ip = peer.substr(3, end - 3);
    port = peer.substr(end + 4);
  } else {
    const size_t colon = peer.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    ip = peer.substr(0, colon);
    port = peer.substr(colon + 1);
  }
  const std::optional<uint16_t> number = ParseNumber<uint16_t>(port, 10);
  if (!number) return std::nullopt;
  return FromIpText(ip, *number);
}

std::vector<TcpSocketRow> ParseTcpTable(std::istream& table) {
  std::vector<TcpSocketRow> rows;
  std::string line;
  std::getline(table, line);  // the header
  while (std::getline(table, line)) {
    // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    if (!(fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode)) {
      continue;
    }
    const std::optional<TcpEndpoint> local_address = ParseTableAddress(local);
    const std::optional<TcpEndpoint> remote_address = ParseTableAddress(remote);
    const std::optional<int> state_number = ParseNumber<int>(state, 16);
    const std::optional<uid_t> owner = ParseNumber<uid_t>(uid, 10);
    const std::optional<uint64_t> inode_number = ParseNumber<uint64_t>(inode, 10);
    if (!local_address || !remote_address || !state_number || !owner || !inode_number) continue;
    rows.push_back(TcpSocketRow{.local = *local_address,
                                .remote = *remote_address,
                                .state = *state_number,
                                .uid = *owner,
                                .inode = *inode_number});
  }
  return rows;
}

Result<LoopbackPeers> LoopbackPeers::ForListenAddress(std::string_view listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string_view::npos) {
    return InvalidArgument(fmt::format("listen address '{}' is not HOST:PORT", listen));
  }
  std::string host(listen.substr(0, colon));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string port(listen.substr(colon + 1));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0) {
    return InvalidArgument(fmt::format("listen address '{}': {}", listen, ::gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owned(found, &::freeaddrinfo);
  std::vector<TcpEndpoint> daemon;
  for (const addrinfo* entry = found; entry != nullptr; entry = entry->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    uint16_t number = 0;
    if (entry->ai_family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(entry->ai_addr);
      ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
      number = ntohs(v4->sin_port);
    } else if (entry->ai_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(entry->ai_addr);
      ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text));
      number = ntohs(v6->sin6_port);
    } else {
      continue;
    }
    if (std::optional<TcpEndpoint> address = FromIpText(text, number)) daemon.push_back(*address);
  }
  if (daemon.empty()) {
    return InvalidArgument(fmt::format("listen address '{}' names no IP address", listen));
  }
  return LoopbackPeers(std::move(daemon));
}

bool LoopbackPeers::IsDaemon(const TcpEndpoint& address) const {
  for (const TcpEndpoint& listening : daemon_) {
    if (address.port != listening.port) continue;
    if (address.ip == listening.ip) return true;
    if (listening.unspecified()) return true;
  }
  return false;
}

Result<uid_t> LoopbackPeers::OwnerIn(std::string_view peer,
                                     std::span<const TcpSocketRow> rows) const {
  const std::optional<TcpEndpoint> address = ParseGrpcPeer(peer);
  if (!address) return PermissionDenied(fmt::format("cannot read the TCP peer '{}'", peer));
  // Any state: a half-closed end (FIN_WAIT) is still the connection's.
  std::set<uid_t> owners;
  size_t sockets = 0;
  for (const TcpSocketRow& row : rows) {
    if (row.inode == 0 || row.local != *address || !IsDaemon(row.remote)) continue;
    ++sockets;
    owners.insert(row.uid);
  }
  if (sockets == 1) return *owners.begin();
  if (sockets == 0) {
    return PermissionDenied(fmt::format(
        "the TCP peer {} is not an open socket of this host connected to this daemon, so its "
        "user is unknown",
        peer));
  }
  return PermissionDenied(fmt::format(
      "{} sockets of this host are the TCP peer {} connected to this daemon, so its user is "
      "unknown",
      sockets, peer));
}

Result<uid_t> LoopbackPeers::OwnerOf(std::string_view peer) const {
  std::vector<TcpSocketRow> rows;
  // gRPC's sockets are often IPv6 ones carrying IPv4 (v4-mapped): both tables.
  for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream table(path);
    std::vector<TcpSocketRow> more = ParseTcpTable(table);
    rows.insert(rows.end(), more.begin(), more.end());
  }
  return OwnerIn(peer, rows);
}

}  // namespace tocl::directory
