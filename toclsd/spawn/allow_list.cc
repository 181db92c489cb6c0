#include "spawn/allow_list.h"

#include <fmt/format.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdlib.h>

#include <cerrno>
#include <memory>

#include "core/posix.h"

namespace tocl::daemon::spawn {

Status ValidateAllowGlob(std::string_view glob) {
  if (glob.empty()) return InvalidArgument("spawn allow: an empty entry");
  if (glob.find('\0') != std::string_view::npos) {
    return InvalidArgument("spawn allow: an entry contains a NUL byte");
  }
  if (!glob.starts_with('/')) {
    return InvalidArgument(fmt::format(
        "spawn allow '{}' is not an absolute path (globs match the executable's real path, "
        "e.g. /usr/bin/*)",
        glob));
  }
  if (glob.size() > 1 && glob.ends_with('/')) {
    return InvalidArgument(
        fmt::format("spawn allow '{}' ends with '/': it names a directory, never a program "
                    "(write '{}*' for the programs in it)",
                    glob, glob));
  }
  if (glob.find("//") != std::string_view::npos) {
    return InvalidArgument(
        fmt::format("spawn allow '{}' has an empty path component ('//')", glob));
  }
  // Real paths have no "." or ".." components: such a glob would never match.
  size_t start = 1;
  while (start < glob.size()) {
    size_t end = glob.find('/', start);
    if (end == std::string_view::npos) end = glob.size();
    const std::string_view component = glob.substr(start, end - start);
    if (component == "." || component == "..") {
      return InvalidArgument(
          fmt::format("spawn allow '{}' has a '{}' component (globs match real paths, which "
                      "have none)",
                      glob, component));
    }
    start = end + 1;
  }
  return Status::Ok();
}

bool AllowList::Allows(const std::string& real_path) const {
  for (const std::string& glob : globs_) {
    // FNM_PATHNAME: a '*' stays within one directory. FNM_PERIOD is not
    // used: "/opt/app/bin/*" allows "/opt/app/bin/.hidden" too.
    if (::fnmatch(glob.c_str(), real_path.c_str(), FNM_PATHNAME) == 0) return true;
  }
  return false;
}

Result<std::string> RealPath(const std::string& path) {
  std::unique_ptr<char, decltype(&::free)> real(::realpath(path.c_str(), nullptr), &::free);
  if (real == nullptr) {
    const int error = errno;
    if (error == ENOENT || error == ENOTDIR) {
      return NotFound(fmt::format("no such executable {}", path));
    }
    return ErrnoStatus(fmt::format("resolve the real path of {}", path), error);
  }
  return std::string(real.get());
}

}  // namespace tocl::daemon::spawn
