#include "runtime/network_spec.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <bit>
#include <charconv>
#include <memory>

#if TOCL_WITH_VIA
#include "subsystem/via/provider.h"
#endif

namespace tocl::runtime {

namespace {

struct Interface {
  std::string name;
  uint32_t ipv4 = 0;  // host byte order
  int prefix = 32;
  bool up = false;
  bool loopback = false;
};

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

// A network bound to one IPv4 address: tcp, or via.
NetworkSpec Tcp(std::string device, uint32_t ip, int prefix, std::string_view kind = "tcp") {
  NetworkSpec spec;
  spec.kind = std::string(kind);
  spec.device = std::move(device);
  spec.ip = Ipv4String(ip);
  spec.prefix = prefix;
  return spec;
}

Result<NetworkSpec> ParseTcp(std::string_view arg, const std::vector<Interface>& interfaces,
                             std::string_view kind) {
  if (arg.empty()) return Tcp("lo", 0x7f000001, 8, kind);
  std::string_view ip_part = arg;
  std::optional<int> prefix;
  if (auto slash = arg.find('/'); slash != std::string_view::npos) {
    ip_part = arg.substr(0, slash);
    int value = -1;
    auto text = arg.substr(slash + 1);
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || value < 0 || value > 32) {
      return InvalidArgument(fmt::format("bad prefix length in '{}:{}'", kind, arg));
    }
    prefix = value;
  }
  if (auto ip = ParseIpv4(ip_part)) {
    for (const Interface& item : interfaces) {
      if (item.ipv4 == *ip) return Tcp(item.name, *ip, prefix.value_or(item.prefix), kind);
    }
    const bool loopback = (*ip >> 24) == 127;
    return Tcp(loopback ? "lo" : "", *ip, prefix.value_or(loopback ? 8 : 32), kind);
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
    return InvalidArgument(fmt::format("'{}:{}': an interface takes no prefix", kind, arg));
  }
  for (const Interface& item : interfaces) {
    if (item.name == ip_part) return Tcp(item.name, item.ipv4, item.prefix, kind);
  }
  return InvalidArgument(
      fmt::format("'{}:{}': no interface of that name with an IPv4 address", kind, ip_part));
}

}  // namespace

std::vector<std::string_view> SplitList(std::string_view text) {
  std::vector<std::string_view> entries;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view entry = text.substr(start, comma - start);
    start = comma + 1;
    while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
    while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
    if (!entry.empty()) entries.push_back(entry);
  }
  return entries;
}

std::string_view KindOf(std::string_view network_name) {
  return network_name.substr(0, network_name.find('-'));
}

bool IsLoopback(const NetworkSpec& spec) {
  auto ip = ParseIpv4(spec.ip);
  return (spec.kind == "tcp" || spec.kind == "via") &&
         ((ip && (*ip >> 24) == 127) || spec.ip == "::1");
}

Result<std::vector<NetworkSpec>> ParseNetworks(std::string_view text, bool loopback_only) {
  const std::vector<Interface> interfaces = Interfaces();
  std::vector<NetworkSpec> specs;
  bool shm = false;
  auto add_shm = [&]() -> Status {
    if (shm) return InvalidArgument(fmt::format("shm is listed twice in '{}'", text));
    shm = true;
    NetworkSpec spec;
    spec.kind = spec.name = "shm";
    specs.push_back(std::move(spec));
    return Status::Ok();
  };
  for (std::string_view entry : SplitList(text)) {
    if (entry == "shm") {
      TOCL_RETURN_IF_ERROR(add_shm());
    } else if (entry == "tcp" || entry.starts_with("tcp:")) {
      TOCL_ASSIGN_OR_RETURN(NetworkSpec spec,
                            ParseTcp(entry.size() > 4 ? entry.substr(4) : "", interfaces, "tcp"));
      specs.push_back(std::move(spec));
    } else if (entry == "via" || entry.starts_with("via:")) {
      TOCL_ASSIGN_OR_RETURN(NetworkSpec spec,
                            ParseTcp(entry.size() > 4 ? entry.substr(4) : "", interfaces, "via"));
      specs.push_back(std::move(spec));
    } else if (entry == "auto") {
      if (!shm) TOCL_RETURN_IF_ERROR(add_shm());
      bool any = false;
      for (const Interface& item : interfaces) {
        if (item.up && !item.loopback && !loopback_only) {
          specs.push_back(Tcp(item.name, item.ipv4, item.prefix));
          any = true;
        }
      }
      if (!any) specs.push_back(Tcp("lo", 0x7f000001, 8));
#if TOCL_WITH_VIA
      // With an RDMA device, via (ibverbs) on every interface too; over
      // sockets it would only repeat tcp.
      if (!loopback_only && subsystem::via::IbverbsDevicePresent()) {
        for (const Interface& item : interfaces) {
          if (item.up && !item.loopback)
            specs.push_back(Tcp(item.name, item.ipv4, item.prefix, "via"));
        }
      }
#endif
    } else {
      return InvalidArgument(fmt::format(
          "unknown network '{}' in '{}' (known: shm, tcp, tcp:IFACE, tcp:IP[/PREFIX], via, "
          "via:IFACE, via:IP[/PREFIX], auto)",
          entry, text));
    }
  }
  if (specs.empty()) return InvalidArgument(fmt::format("no network in '{}'", text));
  if (loopback_only) {
    for (const NetworkSpec& spec : specs) {
      if (spec.kind == "shm" || IsLoopback(spec)) continue;
      return PermissionDenied(fmt::format(
          "{} on {}{} is not loopback: without cluster credentials a process's networks stay "
          "on loopback (its daemon has no `credentials`; see README \"Security\")",
          spec.kind, spec.ip, spec.device.empty() ? "" : " (" + spec.device + ")"));
    }
  }
  int tcp_count = 0;
  int via_count = 0;
  for (NetworkSpec& spec : specs) {
    if (spec.kind == "tcp") {
      spec.name = tcp_count == 0 ? "tcp" : fmt::format("tcp-{}", tcp_count);
      ++tcp_count;
    } else if (spec.kind == "via") {
      spec.name = via_count == 0 ? "via" : fmt::format("via-{}", via_count);
      ++via_count;
    }
  }
  return specs;
}

std::string FormatTcpEndpoint(std::string_view listen_address, int prefix) {
  return fmt::format("{}/{}", listen_address, prefix);
}

TcpEndpoint ParseTcpEndpoint(std::string_view published) {
  TcpEndpoint endpoint;
  std::string_view address = published;
  if (auto slash = published.rfind('/'); slash != std::string_view::npos) {
    int value = -1;
    auto text = published.substr(slash + 1);
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec == std::errc() && end == text.data() + text.size() && value >= 0 && value <= 128) {
      endpoint.prefix = value;
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

}  // namespace tocl::runtime
