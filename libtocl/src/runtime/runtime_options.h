// RuntimeOptions with the environment applied and checked.
#pragma once

#include <string>

#include "tocl/runtime.h"

namespace tocl::runtime {

struct ResolvedOptions {
  std::string daemon_address;
  bool shm = true;
  bool tcp = true;
  std::string tcp_bind;
  uint32_t num_classes = 0;  // size classes from 256 B to short_max
};

// Applies $TOCL_DAEMON, $TOCL_SUBSYSTEMS and $TOCL_TCP_BIND where the
// options leave them empty; InvalidArgument names the bad option.
Result<ResolvedOptions> ResolveOptions(const RuntimeOptions& options);

}  // namespace tocl::runtime
