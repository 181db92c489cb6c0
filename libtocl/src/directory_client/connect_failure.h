// Waiting for a new connection to the daemon, and saying why it failed in
// words a user can act on: for TCP, a TLS handshake that fails (a daemon
// with credentials and a client without, credentials of another cluster)
// is told apart from a daemon that does not answer, and reported at once
// instead of after the whole timeout.
#pragma once

#include <chrono>

#include "directory_client/channel.h"
#include "tocl/status.h"

namespace tocl::client {

// Ok once `connection`'s channel is ready. Unavailable "cannot reach the
// daemon at TARGET..." at `deadline`, or as soon as gRPC reports a failed
// handshake on a TCP target.
Status AwaitConnected(const Connection& connection, const ChannelTarget& target,
                      std::chrono::system_clock::time_point deadline);

}  // namespace tocl::client
