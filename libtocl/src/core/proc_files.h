// Reading the kernel's text files about processes: /proc/<pid>/<name>
// whole, and a process's start time in /proc/<pid>/stat.
// Shared by shm (is a peer process still the one that made its segment?)
// and the daemon (is a pid still the process that connected?). The parser
// takes the file's text, so that it is tested without a process.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tocl {

// Field 22 of /proc/<pid>/stat: when the process started, in clock ticks
// (sysconf(_SC_CLK_TCK)) since boot. The command name (field 2) may hold
// spaces and parentheses: the fields are counted after its last ')'.
std::optional<uint64_t> ParseStartTicks(std::string_view stat);

// The whole of /proc/<pid>/<name>; nullopt when it cannot be read (the
// process is gone).
std::optional<std::string> ReadProcFile(pid_t pid, const char* name);

// ParseStartTicks of ReadProcFile(pid, "stat"): nullopt when the process is
// gone. A pid and its start time name one process across pid reuse.
std::optional<uint64_t> ProcessStartTicks(pid_t pid);

}  // namespace tocl
