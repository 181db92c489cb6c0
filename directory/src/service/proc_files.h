// What the daemon reads of /proc/<pid>/status: the user ids and pid
// namespaces (the start time in `stat` and the file reader are core's:
// core/proc_files.h). The parsers take the files' text, so that they are
// tested without a process; ProcessHandle reads the files of a process it
// holds (and checks it was still alive after the read).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tocl::directory {

// The user ids of a process, as /proc/<pid>/status has them.
struct ProcessUids {
  uid_t real = 0;
  uid_t effective = 0;
  uid_t saved = 0;
};

// The "Uid:" line of /proc/<pid>/status.
std::optional<ProcessUids> ParseUids(std::string_view status);
// The "NSpid:" line of /proc/<pid>/status: the process's pid in each pid
// namespace from the one /proc belongs to down to its own (the last).
// nullopt without the line (Linux before 4.1) or when it is malformed.
std::optional<std::vector<pid_t>> ParseNamespacePids(std::string_view status);
}  // namespace tocl::directory
