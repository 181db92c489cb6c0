// One network a process opens (an entry of RuntimeOptions::networks,
// $TOCL_NETWORKS or the host's `networks` attribute, as the transport
// registry parses it), and the addressing the networks bound to an IP
// address share (tcp and via).
//
// Such a network is an interface's IPv4 address and subnet. A process
// publishes it as "IP:PORT/PREFIX" (via puts "PROVIDER:" in front), and a
// sender pairs each of its networks of a kind with a peer endpoint of that
// kind in the same subnet: two NICs on two subnets give two independent
// routes.
//
// Nothing here knows a network kind by name (transport_registry.h does).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tocl/status.h"

namespace tocl::subsystem {

struct NetworkSpec {
  std::string kind;    // the transport's name: "shm", "tcp", "via"
  std::string name;    // unique in the process: "shm", "tcp", "tcp-1", ...
  std::string device;  // bound to an IP: the interface ("eth0"); empty when unknown
  std::string ip;      // bound to an IP: the address to listen on
  int prefix = 32;     // bound to an IP: the subnet's prefix length
};

// An interface of this host with an IPv4 address (getifaddrs).
struct Interface {
  std::string name;
  uint32_t ipv4 = 0;  // host byte order
  int prefix = 32;
  bool up = false;
  bool loopback = false;
};
std::vector<Interface> Interfaces();

// A network of kind `kind` bound to `interface`'s address and subnet.
NetworkSpec IpNetworkOn(std::string_view kind, const Interface& interface);
// IpNetworkOn each of `interfaces` that is up and not loopback, in order:
// what "auto" opens of a kind bound to an IP.
std::vector<NetworkSpec> IpNetworksOnUpInterfaces(std::string_view kind,
                                                  std::span<const Interface> interfaces);
// The same on loopback: 127.0.0.1/8 on "lo".
NetworkSpec LoopbackIpNetwork(std::string_view kind);
// The part of a list entry after "KIND:": "" (loopback), "IFACE" or
// "IP[/PREFIX]". Interfaces are looked up in `interfaces`; an IP without a
// prefix takes its interface's, else /32 (/8 on 127.x, /128 for IPv6).
// InvalidArgument names the entry (a bad prefix, no such interface, an
// interface without an IPv4 address, an interface with a prefix).
Result<NetworkSpec> ParseIpNetwork(std::string_view kind, std::string_view address,
                                   std::span<const Interface> interfaces);

// What a peer published for a network bound to an IP.
struct TcpEndpoint {
  std::string connect;           // "IP:PORT", what the subsystem connects to
  std::optional<uint32_t> ipv4;  // host byte order; none for IPv6
  int prefix = -1;               // -1: not published (reaches any network of the kind)
};
std::string FormatTcpEndpoint(std::string_view listen_address, int prefix);
TcpEndpoint ParseTcpEndpoint(std::string_view published);

// Whether our network `local` reaches `peer`: the peer's address lies in
// our subnet (IPv6 and endpoints without a prefix: assumed yes; loopback
// only on the same host, which the caller checks).
bool TcpReaches(const NetworkSpec& local, const TcpEndpoint& peer);
// What `local` connects to for `published` ("IP:PORT" of ParseTcpEndpoint);
// none when TcpReaches says it does not reach it.
std::optional<std::string> ReachableEndpoint(const NetworkSpec& local, std::string_view published);
// Bound to a loopback address (127.x or ::1): reaches only this host.
bool IsLoopback(const NetworkSpec& spec);

// "tcp-1" -> "tcp".
std::string_view KindOf(std::string_view network_name);

}  // namespace tocl::subsystem
