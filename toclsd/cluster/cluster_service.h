// The gRPC service tocl.directory.v1.Cluster (cluster.proto): Join (the
// seed only), Heartbeat and Replicate, for the other daemons of the
// cluster. Synchronous gRPC, like the directory service: a Replicate
// stream holds one server thread per replica for its life.
//
// Only daemons call it: over mutual TLS with the cluster's credentials, or,
// without credentials (loopback only), from toclsd's own user or root as
// the kernel's socket table says (directory/src/service/caller.h). Callers
// on the unix socket, and other users over loopback TCP, are refused: they
// could otherwise announce members or take host ids.
#pragma once

#include <atomic>
#include <string>
#include <string_view>

#include "cluster/membership.h"
#include "service/caller.h"
#include "store/store.h"
#include "tocl/directory/v1/cluster.grpc.pb.h"

namespace tocl::daemon::cluster {

namespace pb = ::tocl::directory::v1;

class ClusterService final : public pb::Cluster::Service {
 public:
  // `seed`: this daemon hands out host ids. `loopback`: the daemon's TCP
  // listener (plaintext TCP callers, caller.h).
  ClusterService(directory::Store& store, Membership& membership, bool seed,
                 directory::LoopbackPeers loopback);

  // Ends Replicate streams (within their wait slice) and refuses new calls.
  void BeginShutdown();

  grpc::Status Join(grpc::ServerContext* context, const pb::JoinRequest* request,
                    pb::JoinResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const pb::HeartbeatRequest* request,
                         pb::HeartbeatResponse* response) override;
  grpc::Status Replicate(grpc::ServerContext* context, const pb::ReplicateRequest* request,
                         grpc::ServerWriter<pb::ReplicationBatch>* writer) override;

 private:
  bool shutting_down() const { return shutting_down_.load(std::memory_order_acquire); }
  // PERMISSION_DENIED (logged) unless the caller is a daemon (above).
  grpc::Status CheckDaemonCaller(const grpc::ServerContext& context, std::string_view call) const;
  // Sends every own entity as a snapshot; returns the head it is valid at.
  Result<uint64_t> SendSnapshot(grpc::ServerContext* context,
                                grpc::ServerWriter<pb::ReplicationBatch>* writer);

  directory::Store& store_;
  Membership& membership_;
  const bool seed_;
  // No admin group: only whether the caller is a daemon matters here.
  const directory::CallerCheck callers_;
  std::atomic<bool> shutting_down_{false};  // release/acquire: set once, read by handlers
};

}  // namespace tocl::daemon::cluster
