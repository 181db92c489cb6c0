// This daemon's link to one other member: a heartbeat every interval (the
// member list travels with it, both ways) and the replica puller of the
// member's rows, each on its own thread so that a dead member delays no one.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "cluster/replica_puller.h"
#include "service/daemon_channels.h"
#include "store/store.h"
#include "tocl/directory/v1/cluster.grpc.pb.h"

namespace tocl::daemon::cluster {

namespace pb = ::tocl::directory::v1;

class Membership;

class MemberLink {
 public:
  MemberLink(Membership& membership, directory::Store& store, directory::MemberRow peer,
             std::chrono::milliseconds heartbeat_interval,
             const directory::DaemonChannels& channels);
  ~MemberLink();  // Stop()
  MemberLink(const MemberLink&) = delete;
  MemberLink& operator=(const MemberLink&) = delete;

  const directory::MemberRow& peer() const { return peer_; }
  ReplicaPuller& puller() { return *puller_; }

  // Cancels the calls in flight and joins both threads. Not from the
  // link's own threads.
  void Stop();

 private:
  void HeartbeatLoop();

  Membership& membership_;
  directory::Store& store_;
  const directory::MemberRow peer_;
  const std::chrono::milliseconds interval_;
  std::unique_ptr<pb::Cluster::Stub> heartbeat_stub_;

  std::mutex mu_;
  std::condition_variable wake_;              // signalled by Stop
  bool stopping_ = false;                     // guarded by mu_
  grpc::ClientContext* heartbeat_ = nullptr;  // guarded by mu_: the call in flight
  bool warned_ = false;  // only on the heartbeat thread: the member's refusal was logged

  std::unique_ptr<ReplicaPuller> puller_;
  std::thread heartbeat_thread_;  // last: starts after everything it uses exists
};

}  // namespace tocl::daemon::cluster
