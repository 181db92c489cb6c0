// tcp in the transport registry (subsystem/transport_registry.h): networks
// bound to one IP address each ("tcp", "tcp:IFACE", "tcp:IP[/PREFIX]"),
// published as "IP:PORT/PREFIX".
#include <string>

#include "subsystem/tcp/tcp_subsystem.h"
#include "subsystem/transport_registry.h"

namespace tocl::subsystem::tcp {

namespace {

constexpr std::string_view kName = "tcp";

}  // namespace

Transport TcpTransport() {
  Transport transport = IpBoundTransport(kName, Network::kTcp);
  // Every interface that is up (not loopback); loopback when there is none
  // or the process must stay on it.
  transport.automatic = [](std::span<const Interface> interfaces, bool loopback_only) {
    std::vector<NetworkSpec> specs;
    if (!loopback_only) specs = IpNetworksOnUpInterfaces(kName, interfaces);
    if (specs.empty()) specs.push_back(LoopbackIpNetwork(kName));
    return specs;
  };
  transport.open = [](const NetworkSpec& spec, const OpenContext& context) -> Result<OpenNetwork> {
    TcpOptions options;
    options.self_process = context.self_process;
    options.bind_address = spec.ip;
    options.num_classes = context.num_classes;
    options.key = context.key;
    options.unreachable_timeout = context.options.unreachable_timeout;
    OpenNetwork network;
    TOCL_ASSIGN_OR_RETURN(network.subsystem, TcpSubsystem::Open(options, context.reactor,
                                                                context.sink, context.budget));
    network.published = FormatTcpEndpoint(network.subsystem->address(), spec.prefix);
    return network;
  };
  // "IP:PORT/PREFIX" when in our subnet: connect to "IP:PORT".
  transport.connect_address = ReachableEndpoint;
  return transport;
}

}  // namespace tocl::subsystem::tcp
