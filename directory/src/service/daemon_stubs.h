// Directory stubs to other daemons of the cluster, one channel per address,
// kept for the daemon's life: a forwarded spawn must not pay for a TCP,
// TLS and HTTP/2 handshake each time.
//
// Thread-safe. Stubs are never removed (a cluster has a few hundred hosts at
// most); a channel whose daemon went away reconnects by itself.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "service/daemon_channels.h"
#include "tocl/directory/v1/directory.grpc.pb.h"
#include "tocl/gid.h"

namespace tocl::directory {

// Metadata a forwarding daemon puts on the calls it forwards: a forwarded
// call is answered where it lands, never forwarded again (no loops when two
// daemons' views of the cluster disagree).
inline constexpr const char* kForwardedByKey = "tocl-forwarded-by";

class DaemonStubs {
 public:
  explicit DaemonStubs(DaemonChannels channels = {}) : channels_(std::move(channels)) {}

  // The stub for the daemon at `address` ("10.0.0.3:7390").
  ::tocl::directory::v1::Directory::Stub& For(const std::string& address);

  // A client context for forwarding the call of `incoming`: its deadline
  // (or `fallback` from now when it has none) and the forwarded-by mark.
  static std::unique_ptr<grpc::ClientContext> ForwardContext(const grpc::ServerContext& incoming,
                                                             Gid self,
                                                             std::chrono::milliseconds fallback);
  // Whether `incoming` was forwarded by another daemon.
  static bool Forwarded(const grpc::ServerContext& incoming);

 private:
  const DaemonChannels channels_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<::tocl::directory::v1::Directory::Stub>>
      stubs_;  // guarded by mu_
};

}  // namespace tocl::directory
