#include "spawn/executable.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "core/posix.h"
#include "core/split_list.h"

namespace tocl::daemon::spawn {
namespace {

enum class Found { kExecutable, kNotExecutable, kAbsent };

Found Check(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return Found::kAbsent;
  if (!S_ISREG(info.st_mode)) return Found::kNotExecutable;
  return ::access(path.c_str(), X_OK) == 0 ? Found::kExecutable : Found::kNotExecutable;
}

}  // namespace

Result<std::string> ResolveExecutable(std::string_view executable, std::string_view search_path,
                                      std::string_view working_directory) {
  if (executable.empty()) return InvalidArgument("no executable given");
  if (executable.find('\0') != std::string_view::npos) {
    return InvalidArgument("the executable's name contains a NUL byte");
  }
  if (executable.find('/') != std::string_view::npos) {
    // Normalised, so that messages name the file plainly ("./x" in /srv
    // is /srv/x).
    std::string path = (std::filesystem::path(working_directory) / std::string(executable))
                           .lexically_normal()
                           .string();
    switch (Check(path)) {
      case Found::kExecutable:
        return path;
      case Found::kNotExecutable:
        return PermissionDenied(fmt::format("{} is not executable", path));
      case Found::kAbsent:
        return NotFound(fmt::format("no such executable {}", path));
    }
  }
  bool saw_other = false;
  // PATH's entries as they are: a directory's name may hold spaces.
  for (std::string_view dir : SplitList(search_path, ':', ListSpaces::kKeep)) {
    std::string path = fmt::format("{}/{}", dir, executable);
    switch (Check(path)) {
      case Found::kExecutable:
        return path;
      case Found::kNotExecutable:
        saw_other = true;
        break;
      case Found::kAbsent:
        break;
    }
  }
  if (saw_other) {
    return PermissionDenied(
        fmt::format("'{}' is in the daemon's PATH, but not as an executable file", executable));
  }
  return NotFound(
      fmt::format("no such executable '{}' in the daemon's PATH ({})", executable, search_path));
}

}  // namespace tocl::daemon::spawn
