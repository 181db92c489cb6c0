// The programs a daemon may start for SpawnProcess: `[spawn] allow` in its
// configuration, a list of fnmatch(3) globs with FNM_PATHNAME ("*" and "?"
// never match a '/'), matched against the real path of the resolved
// executable (every symlink followed), so that a link in an allowed
// directory that points elsewhere is not allowed through it.
//
// An empty list allows nothing: spawning is disabled.
//
// Immutable after construction; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tocl/status.h"

namespace tocl::daemon::spawn {

// Checks one glob: not empty, absolute, no NUL byte, no "." or ".."
// component, no "//" and no trailing '/' (real paths have none, such a glob
// could never match). The error names `glob`.
Status ValidateAllowGlob(std::string_view glob);

class AllowList {
 public:
  AllowList() = default;
  // The globs must have passed ValidateAllowGlob (the config checks them).
  explicit AllowList(std::vector<std::string> globs) : globs_(std::move(globs)) {}

  bool empty() const { return globs_.empty(); }
  // Whether `real_path` (absolute, symlinks resolved) matches a glob.
  bool Allows(const std::string& real_path) const;

 private:
  std::vector<std::string> globs_;
};

// The real path of `path` (realpath(3)): NotFound when it no longer exists.
Result<std::string> RealPath(const std::string& path);

}  // namespace tocl::daemon::spawn
