// Channels from this daemon to other daemons: the cluster's Join,
// heartbeats and replication (toclsd/cluster/) and forwarded spawn, kill
// and log calls (daemon_stubs.h). Plaintext when the daemon has no
// credentials (it then only talks to daemons on loopback); mutual TLS with
// the host's certificate when it has (grpc_tls/tls_credentials.h).
//
// A value type: copies share gRPC's channel credentials (immutable).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "security/credentials.h"

namespace tocl::directory {

class DaemonChannels {
 public:
  DaemonChannels() = default;  // plaintext
  explicit DaemonChannels(const security::Credentials& credentials);

  bool tls() const { return tls_ != nullptr; }

  // A channel of its own to the daemon at `address` ("10.0.0.2:7390"): no
  // subchannel shared with other channels to the same address, so that
  // heartbeats never queue behind a large replication batch on one HTTP/2
  // connection. Reconnects within about a second of a peer's restart; 64
  // MiB messages, like the daemon's server.
  std::shared_ptr<grpc::Channel> New(const std::string& address) const;

 private:
  // Shared (gRPC hands out credentials as shared_ptr); null: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> tls_;
};

}  // namespace tocl::directory
