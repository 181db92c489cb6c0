// What the daemon reads of /proc/<pid>: the user ids and pid namespaces in
// `status`, the start time in `stat`. The parsers take the files' text, so
// that they are tested without a process; ProcessHandle reads the files of
// a process it holds (and checks it was still alive after the read).
#pragma once

#include <sys/types.h>

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tocl::directory {

// `text`, all of it, as a number in `base`: how the kernel's text files
// (/proc/<pid>/status and stat, /proc/net/tcp) and the daemon's own
// ("fd:N" peers, forwarded uids) are read. nullopt for an empty text, a
// sign where `Number` has none, trailing characters or an overflow.
template <typename Number>
std::optional<Number> ParseNumber(std::string_view text, int base = 10) {
  Number value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
}

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
// Field 22 of /proc/<pid>/stat: when the process started, in clock ticks
// (sysconf(_SC_CLK_TCK)) since boot. The command name (field 2) may hold
// spaces and parentheses: the fields are counted after its last ')'.
std::optional<uint64_t> ParseStartTicks(std::string_view stat);

// The whole of /proc/<pid>/<name>; nullopt when it cannot be read (the
// process is gone).
std::optional<std::string> ReadProcFile(pid_t pid, const char* name);

}  // namespace tocl::directory
