#include "subsystem/transport_registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "core/split_list.h"

namespace tocl::subsystem {

TransportRegistry::TransportRegistry(std::vector<Transport> transports,
                                     std::vector<std::string_view> left_out)
    : transports_(std::move(transports)), left_out_(std::move(left_out)) {}

Result<const Transport*> TransportRegistry::Find(std::string_view name) const {
  for (const Transport& transport : transports_) {
    if (transport.name == name) return &transport;
  }
  if (std::find(left_out_.begin(), left_out_.end(), name) != left_out_.end()) {
    return InvalidArgument(fmt::format("this libtocl was built without the {} subsystem", name));
  }
  std::string known;
  for (const Transport& transport : transports_) {
    known += fmt::format("{}{}", known.empty() ? "" : ", ", transport.name);
  }
  return InvalidArgument(fmt::format("unknown network kind '{}' (known: {})", name, known));
}

std::string TransportRegistry::ListSyntax() const {
  std::string syntax;
  for (const Transport& transport : transports_) {
    syntax += fmt::format("{}, ", transport.name);
    if (transport.ip_bound) {
      syntax += fmt::format("{0}:IFACE, {0}:IP[/PREFIX], ", transport.name);
    }
  }
  return syntax + "auto";
}

Result<std::vector<NetworkSpec>> TransportRegistry::ParseNetworks(std::string_view text,
                                                                  bool loopback_only) const {
  const std::vector<Interface> interfaces = Interfaces();
  std::vector<NetworkSpec> specs;
  auto listed = [&](const Transport& transport) {
    return std::any_of(specs.begin(), specs.end(),
                       [&](const NetworkSpec& spec) { return spec.kind == transport.name; });
  };
  for (std::string_view entry : SplitList(text)) {
    if (entry == "auto") {
      for (const Transport& transport : transports_) {
        if (transport.host_local && listed(transport)) continue;
        for (NetworkSpec& spec : transport.automatic(interfaces, loopback_only)) {
          specs.push_back(std::move(spec));
        }
      }
      continue;
    }
    // NAME, or NAME:ADDRESS for a kind bound to an IP.
    const Transport* transport = nullptr;
    std::string_view address;
    for (const Transport& candidate : transports_) {
      if (entry == candidate.name) {
        transport = &candidate;
      } else if (candidate.ip_bound && entry.starts_with(candidate.name) &&
                 entry.size() > candidate.name.size() && entry[candidate.name.size()] == ':') {
        transport = &candidate;
        address = entry.substr(candidate.name.size() + 1);
      }
      if (transport != nullptr) break;
    }
    if (transport == nullptr) {
      const std::string_view kind = entry.substr(0, entry.find(':'));
      if (std::find(left_out_.begin(), left_out_.end(), kind) != left_out_.end()) {
        return InvalidArgument(
            fmt::format("'{}' in '{}': this libtocl was built without the {} "
                        "subsystem",
                        entry, text, kind));
      }
      return InvalidArgument(
          fmt::format("unknown network '{}' in '{}' (known: {})", entry, text, ListSyntax()));
    }
    if (transport->host_local && listed(*transport)) {
      return InvalidArgument(fmt::format("{} is listed twice in '{}'", transport->name, text));
    }
    TOCL_ASSIGN_OR_RETURN(NetworkSpec spec, transport->parse(address, interfaces));
    specs.push_back(std::move(spec));
  }
  if (specs.empty()) return InvalidArgument(fmt::format("no network in '{}'", text));
  if (loopback_only) {
    for (const NetworkSpec& spec : specs) {
      TOCL_ASSIGN_OR_RETURN(const Transport* transport, Find(spec.kind));
      if (transport->host_local || IsLoopback(spec)) continue;
      return PermissionDenied(fmt::format(
          "{} on {}{} is not loopback: without cluster credentials a process's networks stay "
          "on loopback (its daemon has no `credentials`; see README \"Security\")",
          spec.kind, spec.ip, spec.device.empty() ? "" : " (" + spec.device + ")"));
    }
  }
  std::map<std::string, int, std::less<>> count;  // networks of each kind so far
  for (NetworkSpec& spec : specs) {
    const int index = count[spec.kind]++;
    spec.name = index == 0 ? spec.kind : fmt::format("{}-{}", spec.kind, index);
  }
  return specs;
}

Status TransportRegistry::ResolveOptions(RuntimeOptions& options) const {
  for (const Transport& transport : transports_) {
    if (transport.resolve_options) TOCL_RETURN_IF_ERROR(transport.resolve_options(options));
  }
  return Status::Ok();
}

Transport IpBoundTransport(std::string_view name, Network network) {
  Transport transport;
  transport.name = name;
  transport.network = network;
  transport.ip_bound = true;
  transport.parse = [name](std::string_view address, std::span<const Interface> interfaces) {
    return ParseIpNetwork(name, address, interfaces);
  };
  return transport;
}

// --- the kinds this libtocl is built with -------------------------------------
// The one place that lists them, each behind its CMake option.

const TransportRegistry& CompiledTransports() {
  static const TransportRegistry registry(
      {
#if TOCL_WITH_SHM
        shm::ShmTransport(),
#endif
#if TOCL_WITH_TCP
            tcp::TcpTransport(),
#endif
#if TOCL_WITH_VIA
            via::ViaTransport(),
#endif
      },
      {
#if !TOCL_WITH_SHM
        "shm",
#endif
#if !TOCL_WITH_TCP
            "tcp",
#endif
#if !TOCL_WITH_VIA
            "via",
#endif
      });
  return registry;
}

Result<std::string> NetworksFromOlderSpelling(std::string_view subsystems,
                                              std::string_view tcp_bind) {
  const std::string list = subsystems.empty() ? "shm,tcp" : std::string(subsystems);
  std::string networks;
  for (std::string_view entry : SplitList(list)) {
    if (auto kind = CompiledTransports().Find(entry.substr(0, entry.find(':'))); !kind.ok()) {
      return kind.status().WithContext(fmt::format("subsystem '{}' in '{}'", entry, list));
    }
    std::string name(entry);
    if (name == "tcp" && !tcp_bind.empty()) name = fmt::format("tcp:{}", tcp_bind);
    networks += (networks.empty() ? "" : ",") + name;
  }
  if (networks.empty()) return InvalidArgument(fmt::format("no subsystem enabled by '{}'", list));
  return networks;
}

}  // namespace tocl::subsystem
