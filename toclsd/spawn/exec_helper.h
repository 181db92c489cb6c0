// toclsd-exec, the program through which a daemon running as root starts a
// spawned program as `[spawn] run_as`: posix_spawn cannot change the uid,
// and a multithreaded daemon must not fork. The daemon posix_spawns
// toclsd-exec (as root, with an empty environment: nothing of the request
// reaches a root process, LD_PRELOAD above all), which sets the groups, gid
// and uid, checks that root cannot be regained, and execs the program with
// the environment it was given as arguments. Its pid is the program's.
//
//   toclsd-exec UID GID GROUPS PATH ARGC ARG0..ARG(ARGC-1) ENV...
//
// GROUPS is a comma-separated list of gids ("" for none). Descriptor 3 is a
// close-on-exec pipe to the daemon: nothing is written when the exec
// succeeds; otherwise an ExecReport, and toclsd-exec exits 127.
#pragma once

#include <string>
#include <vector>

#include "core/posix.h"
#include "spawn/exec_report.h"
#include "spawn/run_as.h"
#include "tocl/status.h"

namespace tocl::daemon::spawn {

inline constexpr const char* kExecHelperName = "toclsd-exec";

// toclsd-exec next to this daemon's executable (/proc/self/exe). Refused
// unless it is a regular executable file owned by root or by the daemon's
// user and writable by nobody else: the daemon runs it as root.
Result<std::string> FindExecHelper();

// toclsd-exec's command line for running `program` (a real path) with
// `argv` (argv[0] first) and `env` as `identity`.
std::vector<std::string> ExecHelperArgs(const std::string& helper, const RunAs& identity,
                                        const std::string& program,
                                        const std::vector<std::string>& argv,
                                        const std::vector<std::string>& env);

// Reads toclsd-exec's report from the pipe's read end, blocking until the
// exec succeeded (end of file: stage 0) or failed.
ExecReport ReadExecReport(const Fd& read_end);

// A failure before the exec (stage kArguments..kRegain), as a Status.
Status DescribeExecFailure(const ExecReport& report, const RunAs& identity);

}  // namespace tocl::daemon::spawn
