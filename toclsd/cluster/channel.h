// gRPC channels from one daemon to another daemon's Cluster service.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

namespace tocl::daemon::cluster {

// A channel of its own (no subchannel shared with other channels to the same
// address): heartbeats must not queue behind a large replication batch on
// one HTTP/2 connection. Reconnects within about a second of a peer's
// restart; 64 MiB messages, like the daemon's server.
std::shared_ptr<grpc::Channel> NewPeerChannel(const std::string& address);

}  // namespace tocl::daemon::cluster
