// Which networks a process opens (RuntimeOptions::networks, $TOCL_NETWORKS,
// the host's `networks` attribute) and which of them reach a peer.
//
// A tcp network is an interface's IPv4 address and subnet. A process
// publishes each tcp network as "IP:PORT/PREFIX", and a sender pairs each of
// its tcp networks with a peer endpoint in the same subnet: two NICs on two
// subnets give two independent routes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tocl/status.h"

namespace tocl::runtime {

struct NetworkSpec {
  std::string kind;    // "shm" or "tcp"
  std::string name;    // unique in the process: "shm", "tcp", "tcp-1", ...
  std::string device;  // tcp: the interface ("eth0"); empty when unknown
  std::string ip;      // tcp: the address to listen on
  int prefix = 32;     // tcp: the subnet's prefix length
};

// Parses a comma-separated list: "shm", "tcp" (127.0.0.1/8), "tcp:IFACE",
// "tcp:IP[/PREFIX]", "auto". Interfaces are looked up now (getifaddrs); an
// IP without a prefix takes its interface's, else /32. InvalidArgument
// names the bad entry (unknown kind, no such interface, an interface
// without an IPv4 address, shm twice).
//
// `loopback_only` is for a process without the cluster's data-plane secret
// (its daemon has no credentials): "auto" then means shm and tcp on
// loopback, and any other address is refused (PermissionDenied, saying
// why), since its connections would be unauthenticated.
Result<std::vector<NetworkSpec>> ParseNetworks(std::string_view text, bool loopback_only = false);

// What a peer published for a tcp network.
struct TcpEndpoint {
  std::string connect;           // "IP:PORT", what the tcp subsystem connects to
  std::optional<uint32_t> ipv4;  // host byte order; none for IPv6
  int prefix = -1;               // -1: not published (reaches any tcp network)
};
std::string FormatTcpEndpoint(std::string_view listen_address, int prefix);
TcpEndpoint ParseTcpEndpoint(std::string_view published);

// Whether our tcp network `local` reaches `peer`: the peer's address lies in
// our subnet (IPv6 and endpoints without a prefix: assumed yes; loopback
// only on the same host, which the caller checks).
bool TcpReaches(const NetworkSpec& local, const TcpEndpoint& peer);
bool IsLoopback(const NetworkSpec& spec);

// The trimmed, non-empty entries of a comma-separated list.
std::vector<std::string_view> SplitList(std::string_view text);

// "tcp-1" -> "tcp".
std::string_view KindOf(std::string_view network_name);

}  // namespace tocl::runtime
