// The daemon's ProcessControl: starts programs on this host for
// SpawnProcess (posix_spawn, with the pre-assigned Gid in the environment and
// stdout/stderr to log files), waits until they enroll, supervises them and
// records how they end, sends them signals and reads their logs.
//
// Threading: the ProcessControl methods run on gRPC handler threads, at
// the same time; OnReaped on the supervisor's thread. Every piece of child
// state is guarded by mu_.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>

#include "service/process_control.h"
#include "spawn/allow_list.h"
#include "spawn/log_files.h"
#include "spawn/run_as.h"
#include "spawn/supervisor.h"
#include "store/store.h"

namespace tocl::daemon::spawn {

struct SpawnerOptions {
  std::string state_dir;    // logs go to <state_dir>/logs; default working directory
  std::string socket_path;  // the daemon's unix socket, given to children as TOCL_DAEMON
  AllowList allow;          // the programs it may start; empty: none
  // Set (with the path of toclsd-exec) when children run as another user.
  std::optional<RunAs> run_as;
  std::string exec_helper;
  // A running child's log files keep about their last this many bytes
  // (LogFiles::Cap, checked every second and when it exits); 0: no cap.
  uint64_t log_max_bytes = 0;
};

class Spawner final : public directory::ProcessControl {
 public:
  static Result<std::unique_ptr<Spawner>> Start(directory::Store& store, SpawnerOptions options);
  ~Spawner() override;  // stops reaping; running children are left running

  // The daemon is stopping: spawns in progress return Unavailable and
  // stream-end waits end now.
  void BeginShutdown();

  Result<pb::SpawnProcessResponse> Spawn(const pb::SpawnProcessRequest& request,
                                         const directory::Caller& caller,
                                         std::chrono::milliseconds enroll_timeout) override;
  std::optional<Status> KillChild(Gid process, int signal,
                                  const directory::Caller& caller) override;
  std::optional<uid_t> SpawnedFor(Gid process) override;
  Result<pb::ReadLogResponse> ReadLog(const pb::ReadLogRequest& request,
                                      const directory::Caller& caller) override;
  Status CheckEnrollingPid(Gid process, std::optional<pid_t> pid) override;
  bool OnEnrolled(Gid process) override;
  bool OnStreamEnded(Gid process, uint64_t epoch, std::string_view reason) override;

  // Deletes the log files of processes whose rows were removed (retention).
  void RemoveLogs(std::span<const Gid> processes);

 private:
  // A child of this daemon, from just before it starts until it is reaped
  // and its exit recorded.
  struct Child {
    Gid gid;
    std::string program;
    uid_t spawned_for = 0;  // the caller's uid: it may signal the child and read its logs
    pid_t pid = 0;          // 0 until posix_spawn returned
    // For signals, set with pid: names this process, never a reused pid.
    std::optional<directory::ProcessHandle> process;
    bool enrolled = false;    // it enrolled (OnEnrolled)
    bool recorded = false;    // reaped, and its exit written to the store
    std::string exit_text;    // "exited with status 3", once reaped
    std::string kill_reason;  // why the daemon killed it, if it did
    // Its enroll stream ended: it is marked exited when reaped, or at
    // `deadline` if it has not been reaped by then (StreamEndLoop).
    struct StreamEnd {
      uint64_t epoch;
      std::string reason;
      std::chrono::steady_clock::time_point deadline;
      bool marked = false;  // StreamEndLoop marked it (without a status)
    };
    std::optional<StreamEnd> stream_end;
  };

  Spawner(directory::Store& store, SpawnerOptions options, LogFiles logs);
  void OnReaped(pid_t pid, int wait_status);
  // Marks exited the children whose stream ended and that were not reaped
  // within kReapWait; at stop, all of them at once.
  void StreamEndLoop();
  // The stream-end marking of `child`, outside mu_ (taken, released and
  // taken again around the store write).
  void MarkStreamEndedLocked(std::unique_lock<std::mutex>& lock, Child& child);
  // PermissionDenied (and a warning in the log) unless the allow list
  // takes `path`; the real path to execute otherwise.
  Result<std::string> CheckAllowed(const std::string& path, std::string_view caller) const;
  // Starts the program for the reserved `child`; its pid, or why not.
  // `path` names it in errors, `real_path` is what is executed.
  Result<pid_t> StartChild(const pb::SpawnProcessRequest& request, Gid gid, const std::string& path,
                           const std::string& real_path, const std::string& working_directory,
                           const std::string& token, const Fd& stdout_file, const Fd& stderr_file);
  // Forgets a child that never started and marks its row exited.
  Status Abandon(const std::shared_ptr<Child>& child, const Status& why);
  // Deletes log files whose process is no longer in the directory (left
  // by a daemon that stopped between removing the rows and the files).
  void RemoveOrphanLogs();
  // Every second: the running children's logs are capped (log_max_bytes).
  void LogCapLoop();
  void CapLogs(Gid process);

  directory::Store& store_;
  const SpawnerOptions options_;
  const LogFiles logs_;

  std::mutex mu_;
  // A child enrolled, was recorded, or its stream ended; stopping_.
  std::condition_variable changed_;
  // Shared by the maps and the threads waiting on the child (Spawn,
  // OnStreamEnded), which may outlive its entries.
  std::map<Gid, std::shared_ptr<Child>> by_gid_;    // guarded by mu_
  std::map<pid_t, std::shared_ptr<Child>> by_pid_;  // guarded by mu_
  bool stopping_ = false;                           // guarded by mu_
  bool cap_failed_ = false;                         // a cap failed and was logged; guarded by mu_

  std::thread stream_end_thread_;           // runs StreamEndLoop
  std::thread log_cap_thread_;              // runs LogCapLoop (with log_max_bytes)
  std::unique_ptr<Supervisor> supervisor_;  // last: its thread calls OnReaped
};

}  // namespace tocl::daemon::spawn
