// One running toclsd: the state lock, the directory store, the gRPC server
// (unix socket + optional TCP) and the re-enroll grace period.
#pragma once

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cluster/change_log_trimmer.h"
#include "cluster/cluster.h"
#include "cluster/listen_address.h"
#include "config.h"
#include "retention/retention_sweeper.h"
#include "service/accept_times.h"
#include "service/directory_service.h"
#include "state_lock.h"
#include "store/store.h"
#include "unix_listener.h"

namespace tocl::daemon {

namespace spawn {
class Spawner;
}

class Daemon {
 public:
  // Takes the state directory, opens the store, starts serving. Errors say
  // what is wrong (already running, corrupt database, address in use).
  static Result<std::unique_ptr<Daemon>> Start(const DaemonConfig& config);
  ~Daemon();  // Shutdown() if not done

  // Stops accepting calls, ends streams (without marking their processes
  // exited: they re-enroll), drains writes, releases the state directory.
  // Idempotent; safe from any thread but a gRPC handler.
  void Shutdown();

  // The TCP address actually bound ("" when TCP is disabled); with port 0
  // in the config this names the chosen port.
  const std::string& tcp_address() const { return tcp_address_; }

 private:
  Daemon(const DaemonConfig& config, StateLock lock);
  void ExpireOrphansAfterGrace(std::vector<Gid> orphans);

  const DaemonConfig config_;
  std::string tcp_address_;

  // Declared in setup order; destroyed in reverse.
  StateLock lock_;
  // Written by unix_listener_, read by service_'s calls: outlives both.
  directory::AcceptTimes accept_times_;
  std::unique_ptr<directory::Store> store_;
  std::unique_ptr<spawn::Spawner> spawner_;    // the service's ProcessControl
  std::unique_ptr<cluster::Cluster> cluster_;  // null for a standalone daemon
  std::unique_ptr<cluster::ChangeLogTrimmer> trimmer_;
  std::unique_ptr<retention::RetentionSweeper> sweeper_;  // null: exited entities are kept
  std::unique_ptr<directory::DirectoryService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<UnixListener> unix_listener_;  // hands its connections to server_

  std::mutex mu_;
  std::condition_variable stopping_cv_;
  bool stopping_ = false;  // guarded by mu_
  std::thread grace_thread_;
};

}  // namespace tocl::daemon
