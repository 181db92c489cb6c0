#include "core/proc_files.h"

#include <fstream>
#include <sstream>

#include "core/parse_number.h"

namespace tocl {

std::optional<uint64_t> ParseStartTicks(std::string_view stat) {
  // "pid (comm) state ppid ...": field 3 is the first after the name.
  const size_t name_end = stat.rfind(')');
  if (name_end == std::string_view::npos) return std::nullopt;
  constexpr int kStartTimeField = 22;
  int field = 3;
  size_t i = name_end + 1;
  while (i < stat.size()) {
    while (i < stat.size() && stat[i] == ' ') ++i;
    size_t end = stat.find(' ', i);
    if (end == std::string_view::npos) end = stat.size();
    if (i < end && field == kStartTimeField) return ParseNumber<uint64_t>(stat.substr(i, end - i));
    if (i < end) ++field;
    i = end;
  }
  return std::nullopt;
}

std::optional<std::string> ReadProcFile(pid_t pid, const char* name) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/" + name);
  if (!file) return std::nullopt;
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) return std::nullopt;
  return text.str();
}

std::optional<uint64_t> ProcessStartTicks(pid_t pid) {
  const std::optional<std::string> stat = ReadProcFile(pid, "stat");
  if (!stat) return std::nullopt;
  return ParseStartTicks(*stat);
}

}  // namespace tocl
