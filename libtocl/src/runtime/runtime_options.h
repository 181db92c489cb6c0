// RuntimeOptions with the environment applied and checked.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "tocl/gid.h"
#include "tocl/runtime_options.h"
#include "tocl/status.h"

namespace tocl::runtime {

struct ResolvedOptions {
  // The options as given, with what they leave to the environment filled
  // in: daemon_address, networks (from the older spelling too; empty: ask
  // the host, its `networks` attribute, else "auto"), peer_daemons and each
  // network kind's settings (TransportRegistry::ResolveOptions:
  // via_provider, ...). What the networks are opened with.
  RuntimeOptions options;
  // The daemons of other hosts when ours is in no cluster (options.peer_daemons), by host id.
  std::map<uint32_t, std::string> peer_daemons;
  uint32_t num_classes = 0;  // size classes from 256 B to short_max
};

// Applies $TOCL_DAEMON, $TOCL_NETWORKS ($TOCL_SUBSYSTEMS, $TOCL_TCP_BIND),
// $TOCL_PEER_DAEMONS and each network kind's variables ($TOCL_VIA_PROVIDER,
// $TOCL_VIA_MAX_VIS) where the options leave them empty; InvalidArgument
// names the bad option.
Result<ResolvedOptions> ResolveOptions(const RuntimeOptions& options);

// The process's name when the options give none: the file name of argv[0]
// (as a spawn's default name is the file name of the executable it was
// given: the same, and not cut to 15 bytes as /proc/self/comm is).
std::string ProgramName();

// $TOCL_PARENT: the thread that spawned this process (set by the daemon
// that spawned it), in text form; unset or empty for none. InvalidArgument
// for anything but a thread id.
Result<Gid> ParentFromEnvironment();

}  // namespace tocl::runtime
