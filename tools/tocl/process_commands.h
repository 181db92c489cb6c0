// The subcommands of `tocl` that act on processes and threads anywhere in
// the cluster: spawn, spawn-thread, kill, wait, logs. Same conventions as
// commands.h (stdout results, one "tocl: ..." line on errors, exit codes of
// exit_code.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "commands.h"
#include "tocl/status.h"

namespace tocl::cli {

struct SpawnCommand {
  std::string host;   // --host: "h2" (empty: none)
  std::string where;  // --where: a query over hosts
  std::string name;
  std::vector<std::string> attributes;  // KEY=VALUE
  std::vector<std::string> env;         // KEY=VALUE
  std::string working_directory;
  double enroll_timeout_seconds = 0;  // 0: the daemon's default
  std::vector<std::string> command;   // PROGRAM ARGS...
};
// Spawns PROGRAM through the daemon; prints the new process's id, pid and
// log files once it has enrolled.
int RunSpawn(const CommonOptions& options, const SpawnCommand& spawn);

// Starts a thread running the entry `entry` in `process`; prints its id. The
// command enrolls itself as a short-lived tocl process to ask (the request
// travels over the messaging networks, like Runtime::SpawnThread's).
int RunSpawnThread(const CommonOptions& options, const std::string& process,
                   const std::string& entry, const std::string& payload);

// Sends a signal ("TERM", "SIGKILL", "9"; default TERM) to a process.
int RunKill(const CommonOptions& options, const std::string& gid_text, const std::string& signal);

// Waits until a thread, process or host exits or becomes unreachable (at
// most `timeout`, 0: for ever) and prints how it ended.
int RunWait(const CommonOptions& options, const std::string& gid_text, double timeout_seconds);

// Prints a spawned process's stdout (or stderr); with `follow`, goes on
// printing what it writes until it exits (or Ctrl-C).
int RunLogs(const CommonOptions& options, const std::string& gid_text, bool stderr_stream,
            bool follow);

// "TERM", "SIGTERM", "term", "15" -> 15; InvalidArgument otherwise.
Result<int> ParseSignal(std::string_view text);

}  // namespace tocl::cli
