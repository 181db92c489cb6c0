// Keeps this daemon's replica of one other host's rows: holds the member's
// Cluster.Replicate stream and applies each batch as it arrives (one writer
// transaction per batch), from the progress recorded in the store, so a
// restart or a broken stream resumes where it stopped.
//
// One thread per member. Thread-safe: Reconnect, CancelIfSilent and Stop may
// be called from any thread.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "store/store.h"
#include "tocl/directory/v1/cluster.grpc.pb.h"

namespace tocl::daemon::cluster {

namespace pb = ::tocl::directory::v1;

class ReplicaPuller {
 public:
  // Pulls `origin`'s changes over `channel`; `heard` runs on every batch
  // (replication traffic proves the member alive).
  ReplicaPuller(directory::Store& store, Gid origin, std::shared_ptr<grpc::Channel> channel,
                std::function<void()> heard);
  ~ReplicaPuller();  // Stop()
  ReplicaPuller(const ReplicaPuller&) = delete;
  ReplicaPuller& operator=(const ReplicaPuller&) = delete;

  // Ends the current stream and connects again at once (the member is
  // back: no backoff).
  void Reconnect();
  // Ends the current stream if nothing arrived on it for `silence` (a
  // member that stopped without closing its connection sends no keepalives).
  void CancelIfSilent(std::chrono::steady_clock::duration silence);
  void Stop();

 private:
  void Loop();
  // One stream, until it ends: true when it delivered at least one batch.
  bool PullOnce();
  // Applies one batch; `in_snapshot` tracks a snapshot across batches.
  Status Apply(pb::ReplicationBatch& batch, bool& in_snapshot, uint64_t& applied);

  directory::Store& store_;
  const Gid origin_;
  std::unique_ptr<pb::Cluster::Stub> stub_;
  const std::function<void()> heard_;

  std::mutex mu_;
  std::condition_variable wake_;                         // signalled on Stop and Reconnect
  bool stopping_ = false;                                // guarded by mu_
  bool reconnect_now_ = false;                           // guarded by mu_
  grpc::ClientContext* context_ = nullptr;               // guarded by mu_: the open stream's
  std::chrono::steady_clock::time_point last_activity_;  // guarded by mu_
  // Only on the puller's thread: the last attempt failed (logged once), and
  // a stream has delivered before (failures before that are not news).
  bool failing_ = false;
  bool streamed_ = false;

  std::thread thread_;  // last: starts after everything it uses exists
};

}  // namespace tocl::daemon::cluster
