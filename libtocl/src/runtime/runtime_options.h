// RuntimeOptions with the environment applied and checked.
#pragma once

#include <map>
#include <string>

#include "tocl/runtime_options.h"

namespace tocl::runtime {

struct ResolvedOptions {
  std::string daemon_address;
  // The networks to open (TransportRegistry::ParseNetworks syntax); empty:
  // ask the host (its `networks` attribute), else "auto".
  std::string networks;
  // Until the cluster issue lands: the daemons of other hosts, by host id.
  std::map<uint32_t, std::string> peer_daemons;
  uint32_t num_classes = 0;  // size classes from 256 B to short_max
  // The options with each network kind's settings filled in from the
  // environment (TransportRegistry::ResolveOptions: via_provider, ...).
  RuntimeOptions options;
};

// Applies $TOCL_DAEMON, $TOCL_NETWORKS ($TOCL_SUBSYSTEMS, $TOCL_TCP_BIND),
// $TOCL_PEER_DAEMONS and each network kind's variables ($TOCL_VIA_PROVIDER,
// $TOCL_VIA_MAX_VIS) where the options leave them empty; InvalidArgument
// names the bad option.
Result<ResolvedOptions> ResolveOptions(const RuntimeOptions& options);

}  // namespace tocl::runtime
