// Finding the program a spawn request names, before anything is started, so
// that a missing or non-executable file is a clear error, not a child that
// dies at once.
#pragma once

#include <string>
#include <string_view>

#include "tocl/status.h"

namespace tocl::daemon::spawn {

// The path to execute for `executable`:
// - with a '/': that file (relative to `working_directory`, where the child
//   starts); NotFound "no such executable ...", PermissionDenied "... is not
//   executable" (also for a directory);
// - a bare name: the first executable regular file of that name in
//   `search_path` (the daemon's PATH; empty entries are skipped, they would
//   mean the daemon's own working directory); NotFound when there is none,
//   PermissionDenied when only non-executable ones exist.
Result<std::string> ResolveExecutable(std::string_view executable, std::string_view search_path,
                                      std::string_view working_directory);

}  // namespace tocl::daemon::spawn
