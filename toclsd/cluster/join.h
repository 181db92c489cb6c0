// Asking the seed for a host id (Cluster.Join), at daemon start and, when
// the seed was down then, in the background.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "service/daemon_channels.h"
#include "tocl/directory/v1/cluster.pb.h"
#include "tocl/status.h"

namespace tocl::daemon::cluster {

namespace pb = ::tocl::directory::v1;

// Tries each seed address in turn. Ok: the seed's answer. Unavailable: no
// address answered (try again later). Anything else: the seed refused (for
// good: ALREADY_EXISTS when the wanted id belongs to another daemon), the
// message naming the address.
// `wait_for_ready`: wait (within `timeout`) for a seed that refuses
// connections, i.e. is still starting; otherwise such a seed fails at once.
Result<pb::JoinResponse> JoinOnce(const directory::DaemonChannels& channels,
                                  const std::vector<std::string>& seeds,
                                  const pb::JoinRequest& request, std::chrono::milliseconds timeout,
                                  bool wait_for_ready);

}  // namespace tocl::daemon::cluster
