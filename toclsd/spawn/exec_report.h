// What toclsd-exec (exec_helper_main.cc) tells the daemon on descriptor 3
// when it cannot start the program. No dependencies: toclsd-exec includes
// nothing else of tocl.
#pragma once

#include <cstdint>

namespace tocl::daemon::spawn {

inline constexpr int kExecReportFd = 3;

// What failed in toclsd-exec, and its errno.
enum class ExecStage : int32_t {
  kArguments = 1,  // a malformed command line (a daemon bug)
  kSetGroups = 2,
  kSetGid = 3,
  kSetUid = 4,
  kRegain = 5,  // after the switch an id is unchanged, or root can be regained
  kExec = 6,
};

struct ExecReport {
  int32_t stage = 0;  // 0: the exec succeeded
  int32_t error = 0;
};

}  // namespace tocl::daemon::spawn
