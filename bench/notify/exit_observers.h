// The observers of `tocl-bench notify`: everything that learns of a killed
// process, each recording when it first did.
//
//   NoticeWatcher   a tocl::Runtime in the benchmark process (the watcher):
//                   Runtime::Notify as a callback and as a message to a
//                   thread that waits in RecvFor between kills
//   DirectoryWatch  a Watch stream of a daemon (exits only): when that
//                   daemon's directory shows the exit, and when the entry
//                   says it was marked
//   PidfdWait       a thread in poll(2) on the process's pidfd: when the
//                   kernel says it is gone (the floor)
//
// Threading: Arm and the accessors from the benchmark's thread; the
// observers record from their own threads (Sightings).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "sightings.h"
#include "tocl/directory_client.h"
#include "tocl/runtime.h"

namespace tocl::bench {

class NoticeWatcher {
 public:
  // Starts a runtime enrolled with the daemon at `daemon_address` (opening
  // `networks`) and its receiving thread.
  static Result<std::unique_ptr<NoticeWatcher>> Start(const std::string& daemon_address,
                                                      const std::string& networks);
  ~NoticeWatcher();

  Runtime& runtime() { return *runtime_; }
  // A thread of the watcher for calls that need one (SpawnProcess); not the
  // receiving thread.
  Gid caller() const { return caller_; }

  // Watches `target` both ways; `callback_first` decides which watch is made
  // first (notices are dispatched in the order their watches fired, so the
  // benchmark alternates it).
  Status Arm(Gid target, bool callback_first);

  Sightings& callbacks() { return callbacks_; }
  Sightings& messages() { return messages_; }

 private:
  NoticeWatcher() = default;
  void ReceiveLoop();

  std::unique_ptr<Runtime> runtime_;
  Gid caller_;
  Gid receiver_;
  Sightings callbacks_;
  Sightings messages_;
  std::thread receiving_;
};

class DirectoryWatch {
 public:
  static Result<std::unique_ptr<DirectoryWatch>> Start(const std::string& daemon_address);
  ~DirectoryWatch();

  Sightings& exited() { return exited_; }
  // When the daemon marked it exited, by the entity's exited_at (its
  // transaction, before the commit), on the steady clock.
  Sightings& recorded() { return recorded_; }

 private:
  DirectoryWatch() = default;

  std::unique_ptr<DirectoryClient> client_;
  Sightings exited_;
  Sightings recorded_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// One process's pidfd and a thread in poll(2) on it.
class PidfdWait {
 public:
  // Waits up to `timeout` for `pid` to end.
  static Result<std::unique_ptr<PidfdWait>> Start(pid_t pid, std::chrono::milliseconds timeout);
  ~PidfdWait();

  // When the kernel said the process was gone (joins the thread);
  // DeadlineExceeded when it did not within the timeout.
  Result<Sightings::Clock::time_point> Join();

 private:
  PidfdWait() = default;

  int pidfd_ = -1;
  std::optional<Sightings::Clock::time_point> seen_;  // written by thread_ before it ends
  std::thread thread_;
};

}  // namespace tocl::bench
