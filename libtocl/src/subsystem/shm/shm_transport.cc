// shm in the transport registry (subsystem/transport_registry.h): one
// network per process, for the processes of its host, listed as "shm".
#include <string>

#include "subsystem/shm/shm_subsystem.h"
#include "subsystem/transport_registry.h"

namespace tocl::subsystem::shm {

namespace {

constexpr std::string_view kName = "shm";

NetworkSpec Spec() {
  NetworkSpec spec;
  spec.kind = std::string(kName);
  return spec;
}

}  // namespace

Transport ShmTransport() {
  Transport transport;
  transport.name = kName;
  transport.network = Network::kShm;
  transport.host_local = true;
  transport.post_copy = true;     // the sender copies into the buffer the receiver provided
  transport.sleeps_alone = true;  // a futex in the segment
  transport.parse = [](std::string_view /*address*/,
                       std::span<const Interface> /*interfaces*/) -> Result<NetworkSpec> {
    return Spec();
  };
  transport.automatic = [](std::span<const Interface> /*interfaces*/, bool /*loopback_only*/) {
    return std::vector<NetworkSpec>{Spec()};
  };
  transport.open = [](const NetworkSpec& /*spec*/,
                      const OpenContext& context) -> Result<OpenNetwork> {
    ShmOptions options;
    options.self_process = context.self_process;
    options.num_classes = context.num_classes;
    OpenNetwork network;
    TOCL_ASSIGN_OR_RETURN(network.subsystem,
                          OpenShm(options, context.reactor, context.sink, context.budget));
    network.published = network.subsystem->address();
    return network;
  };
  // The segment's name, as published.
  transport.connect_address = [](const NetworkSpec& /*local*/, std::string_view published) {
    return std::optional<std::string>(published);
  };
  return transport;
}

}  // namespace tocl::subsystem::shm
