// This daemon's part in a cluster (toclsd --seed / --join): its identity,
// its host id from the seed, the Cluster service, and the membership
// (heartbeats, down detection, replication of every other host's rows).
//
//   ClusterPlan plan = *PlanCluster(config, listen.address(), channels);  // before the store opens
//   options.host_id = plan.host_id;  ... open the store ...
//   auto cluster = *Cluster::Start(config, std::move(plan), store, channels, loopback);
//   builder.RegisterService(cluster->service());
//   ...
//   cluster->Stop();                                            // before the server stops
#pragma once

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "cluster/cluster_service.h"
#include "cluster/membership.h"
#include "config.h"
#include "service/daemon_channels.h"
#include "service/loopback_peer.h"
#include "store/store.h"
#include "tocl/directory/v1/cluster.pb.h"

namespace tocl::daemon::cluster {

namespace pb = ::tocl::directory::v1;

// What is decided before the store opens.
struct ClusterPlan {
  std::string node_key;
  std::string advertise;  // this daemon's cluster address
  uint32_t host_id = 0;   // for StoreOptions::host_id
  // The seed's answer; unset for the seed itself, and for a daemon that
  // started on its recorded id while no seed answered (it joins later).
  std::optional<pb::JoinResponse> joined;
};

// Reads (or creates) the node key and, when joining, asks the seed for the
// host id: a known daemon gets its id back, `--host-id`/the recorded id is
// asked for, and a refusal is an error. When no seed answers, a daemon with
// a recorded id starts with it; a new one retries until join_timeout, then
// fails. `bound` is the TCP address the daemon listens on; `channels`, how
// the seed is reached (mutual TLS with credentials).
Result<ClusterPlan> PlanCluster(const DaemonConfig& config, const std::string& bound,
                                const directory::DaemonChannels& channels);

class Cluster {
 public:
  // Records the members (the seed: records itself), publishes the address,
  // links to every member. The service must be registered before the server
  // starts. `loopback`: the daemon's TCP listener, by which its service
  // knows plaintext TCP callers (caller.h).
  static Result<std::unique_ptr<Cluster>> Start(const DaemonConfig& config, ClusterPlan plan,
                                                directory::Store& store,
                                                directory::DaemonChannels channels,
                                                directory::LoopbackPeers loopback);
  ~Cluster();  // Stop()

  grpc::Service* service() { return service_.get(); }

  // Stops joining, heartbeats and pullers (their calls are cancelled) and
  // ends Replicate streams. Before the server shuts down.
  void Stop();

 private:
  Cluster(const DaemonConfig& config, ClusterPlan plan, directory::Store& store,
          directory::DaemonChannels channels);
  void JoinInBackground();

  const DaemonConfig config_;
  const ClusterPlan plan_;
  directory::Store& store_;
  const directory::DaemonChannels channels_;
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<ClusterService> service_;

  std::mutex mu_;
  std::condition_variable wake_;  // signalled by Stop
  bool stopping_ = false;         // guarded by mu_
  std::thread joiner_;
};

}  // namespace tocl::daemon::cluster
