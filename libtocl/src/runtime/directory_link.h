// The runtime's link to its daemon: the enrollment, thread registrations in
// background batches, endpoint lookups, and the change stream that tells
// the runtime when processes and threads it sends to exit and hosts go down
// or come back (with the cluster, the local daemon's stream carries every
// host's changes).
//
// The data plane never waits on this: after a destination's first lookup,
// sends go on if the daemon goes away; registrations queued meanwhile are
// sent when the session has re-enrolled.
//
// Threading: every method is safe from any thread. Two background threads:
// the registrar (batches, statistics) and the watcher (change stream).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <thread>
#include <vector>

#include "tocl/directory_client.h"
#include "tocl/network_stats.h"
#include "tocl/pool_stats.h"

namespace tocl::runtime {

struct DirectoryEvents {
  // An entity (process or thread) we may send to has exited.
  std::function<void(Gid gid, const std::string& reason)> on_exited;
  // Every change (after on_exited for exits): hosts going down and coming
  // back, exits with their status, for notifications. Runs on the watcher
  // thread: must not block.
  std::function<void(const ChangeEvent& event)> on_change;
  // Statistics to report every `stats_interval` (each one only when set).
  std::function<std::vector<PoolClassStats>()> pool_stats;
  std::function<std::vector<NetworkStats>()> network_stats;
};

class DirectoryLink {
 public:
  static Result<std::unique_ptr<DirectoryLink>> Start(const std::string& address,
                                                      const EnrollOptions& enroll,
                                                      std::chrono::milliseconds stats_interval,
                                                      DirectoryEvents events);
  ~DirectoryLink();

  Gid process() const { return process_; }
  DirectoryClient& client() { return *client_; }
  // What the daemon gave at enrollment (ProcessSession::data_plane_secret).
  std::string data_plane_secret() const { return session_->data_plane_secret(); }

  void QueueRegister(ThreadInfo thread);
  void QueueUnregister(Gid thread);
  // Waits until everything queued so far reached the daemon (or timeout).
  Status Flush(std::chrono::milliseconds timeout);
  // Publishes an endpoint (synchronously: done once per subsystem at start).
  Status PublishEndpoint(std::string_view subsystem, std::string_view address);

  // Stops the threads, says goodbye (the daemon marks the process exited).
  Status Close();

 private:
  DirectoryLink() = default;
  void RegistrarLoop();
  // One batch to the daemon (registrar thread); see directory_link.cc.
  Status Register(const std::vector<ThreadInfo>& batch);
  Status Unregister(const std::vector<Gid>& leaving);
  void WatchLoop(uint64_t since_seq);
  // Sends the statistics of `events_` (registrar thread).
  void ReportStats();

  std::unique_ptr<DirectoryClient> client_;
  std::unique_ptr<ProcessSession> session_;
  Gid process_;
  DirectoryEvents events_;
  std::chrono::milliseconds stats_interval_{0};

  std::mutex mu_;
  // The registrar's own: new work and Close. One shared with the waiters
  // below would let notify_one wake one of them instead (a registration
  // left until the next statistics tick).
  std::condition_variable work_;
  // Flush (done_ moved) and the watcher's retry pause (Close).
  std::condition_variable cv_;
  std::vector<ThreadInfo> to_register_;  // guarded by mu_
  std::vector<Gid> to_unregister_;       // guarded by mu_
  uint64_t queued_ = 0;                  // guarded by mu_: batches queued
  uint64_t done_ = 0;                    // guarded by mu_: batches the daemon has
  bool stop_ = false;                    // guarded by mu_
  std::atomic<bool> stopping_{false};
  std::stop_source watch_stop_;  // requested by Close: ends the change stream at once
  bool stats_refused_ = false;   // registrar thread only: a report was refused (logged once)
  std::thread registrar_;
  std::thread watcher_;
};

}  // namespace tocl::runtime
