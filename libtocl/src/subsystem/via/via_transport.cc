// via in the transport registry (subsystem/transport_registry.h): networks
// bound to one IP address each ("via", "via:IFACE", "via:IP[/PREFIX]"),
// published as "PROVIDER:IP:PORT/PREFIX", with their provider and VI pool
// in the statistics.
#include <fmt/format.h>

#include <optional>
#include <string>

#include "core/environment.h"
#include "core/parse_number.h"
#include "subsystem/transport_registry.h"
#include "subsystem/via/provider.h"
#include "subsystem/via/via_subsystem.h"

namespace tocl::subsystem::via {

namespace {

constexpr std::string_view kName = "via";

// RuntimeOptions::via_provider ($TOCL_VIA_PROVIDER) and via_max_vis
// ($TOCL_VIA_MAX_VIS).
Status ResolveOptions(RuntimeOptions& options) {
  options.via_provider = ValueOrEnvironment(options.via_provider, "TOCL_VIA_PROVIDER", "auto");
  if (options.via_provider != "auto" && options.via_provider != "sockets" &&
      options.via_provider != "ibverbs") {
    return InvalidArgument(
        fmt::format("unknown via provider '{}' (sockets, ibverbs or auto)", options.via_provider));
  }
  if (options.via_max_vis == 0) {
    const std::string text = FromEnvironment("TOCL_VIA_MAX_VIS", "1024");
    const std::optional<size_t> max_vis = ParseNumber<size_t>(text);
    if (!max_vis || *max_vis == 0) {
      return InvalidArgument(
          fmt::format("TOCL_VIA_MAX_VIS must be a positive number, not '{}'", text));
    }
    options.via_max_vis = *max_vis;
  }
  return Status::Ok();
}

}  // namespace

Transport ViaTransport() {
  Transport transport = IpBoundTransport(kName, Network::kVia);
  // With an RDMA device, via (ibverbs) on every interface that is up (not
  // loopback); over sockets it would only repeat tcp.
  transport.automatic = [](std::span<const Interface> interfaces, bool loopback_only) {
    if (loopback_only || !IbverbsDevicePresent()) return std::vector<NetworkSpec>{};
    return IpNetworksOnUpInterfaces(kName, interfaces);
  };
  transport.resolve_options = ResolveOptions;
  transport.open = [](const NetworkSpec& spec, const OpenContext& context) -> Result<OpenNetwork> {
    ViaOptions options;
    options.self_process = context.self_process;
    options.bind_address = spec.ip;
    options.num_classes = context.num_classes;
    options.provider = context.options.via_provider;
    options.max_vis = context.options.via_max_vis;
    options.unreachable_timeout = context.options.unreachable_timeout;
    options.key = context.key;
    TOCL_ASSIGN_OR_RETURN(
        std::unique_ptr<ViaSubsystem> via,
        ViaSubsystem::Open(options, context.reactor, context.sink, context.budget));
    OpenNetwork network;
    // "sockets:IP:PORT/PREFIX": the provider, then what tcp publishes.
    network.published = FormatTcpEndpoint(via->address(), spec.prefix);
    network.add_stats = [subsystem = via.get()](NetworkStats& stats) {
      stats.provider = std::string(subsystem->provider_name());
      stats.vi_cap = static_cast<uint32_t>(subsystem->max_vis());
      stats.vis_opened = subsystem->vis_opened();
      stats.vis_closed = subsystem->vis_closed();
      stats.vis = subsystem->ViPool();
    };
    network.subsystem = std::move(via);
    return network;
  };
  // "PROVIDER:" in front of what tcp publishes; the provider stays in front
  // of the address connected to.
  transport.connect_address = [](const NetworkSpec& local,
                                 std::string_view published) -> std::optional<std::string> {
    const std::optional<ProviderAddress> split = SplitAddress(published);
    if (!split) return std::nullopt;
    std::optional<std::string> address = ReachableEndpoint(local, split->rest);
    if (!address) return std::nullopt;
    return fmt::format("{}:{}", split->provider, *address);
  };
  return transport;
}

}  // namespace tocl::subsystem::via
