#include "subsystem/network_spec.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <bit>
#include <memory>

#include "core/parse_number.h"

namespace tocl::subsystem {

namespace {

std::string Ipv4String(uint32_t ip) {
  return fmt::format("{}.{}.{}.{}", ip >> 24, (ip >> 16) & 0xff, (ip >> 8) & 0xff, ip & 0xff);
}

std::optional<uint32_t> ParseIpv4(std::string_view text) {
  in_addr addr{};
  if (inet_pton(AF_INET, std::string(text).c_str(), &addr) != 1) return std::nullopt;
  return ntohl(addr.s_addr);
}

bool InSubnet(uint32_t a, uint32_t b, int prefix) {
  if (prefix <= 0) return true;
  const uint32_t mask = prefix >= 32 ? ~uint32_t{0} : ~((uint32_t{1} << (32 - prefix)) - 1);
  return (a & mask) == (b & mask);
}

NetworkSpec IpNetwork(std::string_view kind, std::string device, uint32_t ip, int prefix) {
  NetworkSpec spec;
  spec.kind = std::string(kind);
  spec.device = std::move(device);
  spec.ip = Ipv4String(ip);
  spec.prefix = prefix;
  return spec;
}

}  // namespace

std::vector<Interface> Interfaces() {
  std::vector<Interface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  std::unique_ptr<ifaddrs, decltype(&freeifaddrs)> owner(list, freeifaddrs);
  for (ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) continue;
    Interface item;
    item.name = entry->ifa_name;
    item.ipv4 = ntohl(reinterpret_cast<sockaddr_in*>(entry->ifa_addr)->sin_addr.s_addr);
    if (entry->ifa_netmask != nullptr) {
      const uint32_t mask =
          ntohl(reinterpret_cast<sockaddr_in*>(entry->ifa_netmask)->sin_addr.s_addr);
      item.prefix = std::popcount(mask);
    }
    item.up = (entry->ifa_flags & IFF_UP) != 0 && (entry->ifa_flags & IFF_RUNNING) != 0;
    item.loopback = (entry->ifa_flags & IFF_LOOPBACK) != 0;
    out.push_back(std::move(item));
  }
  return out;
}

NetworkSpec IpNetworkOn(std::string_view kind, const Interface& interface) {
  return IpNetwork(kind, interface.name, interface.ipv4, interface.prefix);
}

std::vector<NetworkSpec> IpNetworksOnUpInterfaces(std::string_view kind,
                                                  std::span<const Interface> interfaces) {
  std::vector<NetworkSpec> specs;
  for (const Interface& item : interfaces) {
    if (item.up && !item.loopback) specs.push_back(IpNetworkOn(kind, item));
  }
  return specs;
}

NetworkSpec LoopbackIpNetwork(std::string_view kind) {
  return IpNetwork(kind, "lo", 0x7f000001, 8);
}

Result<NetworkSpec> ParseIpNetwork(std::string_view kind, std::string_view address,
                                   std::span<const Interface> interfaces) {
  if (address.empty()) return LoopbackIpNetwork(kind);
  std::string_view ip_part = address;
  std::optional<int> prefix;
  if (auto slash = address.find('/'); slash != std::string_view::npos) {
    ip_part = address.substr(0, slash);
    const std::optional<int> value = ParseNumber<int>(address.substr(slash + 1));
    if (!value || *value < 0 || *value > 32) {
      return InvalidArgument(fmt::format("bad prefix length in '{}:{}'", kind, address));
    }
    prefix = *value;
  }
  if (auto ip = ParseIpv4(ip_part)) {
    for (const Interface& item : interfaces) {
      if (item.ipv4 == *ip) return IpNetwork(kind, item.name, *ip, prefix.value_or(item.prefix));
    }
    const bool loopback = (*ip >> 24) == 127;
    return IpNetwork(kind, loopback ? "lo" : "", *ip, prefix.value_or(loopback ? 8 : 32));
  }
  if (ip_part.find(':') != std::string_view::npos) {
    // IPv6: listened on as given; reachability is not checked by subnet.
    NetworkSpec spec;
    spec.kind = std::string(kind);
    spec.ip = std::string(ip_part);
    spec.prefix = prefix.value_or(128);
    return spec;
  }
  if (prefix) {
    return InvalidArgument(fmt::format("'{}:{}': an interface takes no prefix", kind, address));
  }
  for (const Interface& item : interfaces) {
    if (item.name == ip_part) return IpNetworkOn(kind, item);
  }
  return InvalidArgument(
      fmt::format("'{}:{}': no interface of that name with an IPv4 address", kind, ip_part));
}

std::string_view KindOf(std::string_view network_name) {
  return network_name.substr(0, network_name.find('-'));
}

bool IsLoopback(const NetworkSpec& spec) {
  auto ip = ParseIpv4(spec.ip);
  return (ip && (*ip >> 24) == 127) || spec.ip == "::1";
}

std::string FormatTcpEndpoint(std::string_view listen_address, int prefix) {
  return fmt::format("{}/{}", listen_address, prefix);
}

TcpEndpoint ParseTcpEndpoint(std::string_view published) {
  TcpEndpoint endpoint;
  std::string_view address = published;
  if (auto slash = published.rfind('/'); slash != std::string_view::npos) {
    const std::optional<int> value = ParseNumber<int>(published.substr(slash + 1));
    if (value && *value >= 0 && *value <= 128) {
      endpoint.prefix = *value;
      address = published.substr(0, slash);
    }
  }
  endpoint.connect = std::string(address);
  if (auto colon = address.rfind(':'); colon != std::string_view::npos) {
    endpoint.ipv4 = ParseIpv4(address.substr(0, colon));
  }
  return endpoint;
}

bool TcpReaches(const NetworkSpec& local, const TcpEndpoint& peer) {
  auto ours = ParseIpv4(local.ip);
  if (!ours || !peer.ipv4 || peer.prefix < 0) return true;
  return InSubnet(*ours, *peer.ipv4, local.prefix);
}

std::optional<std::string> ReachableEndpoint(const NetworkSpec& local, std::string_view published) {
  TcpEndpoint endpoint = ParseTcpEndpoint(published);
  if (!TcpReaches(local, endpoint)) return std::nullopt;
  return std::move(endpoint.connect);
}

}  // namespace tocl::subsystem
