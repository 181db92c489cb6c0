// What `tocl` exits with, and its one-line error messages on stderr.
//
//   0  success, an empty listing (hosts, ps, threads, pools, networks) too
//   1  not found / no match: an unknown id, a query with no match, the
//      statistics of a process that has not reported
//   2  usage errors (flags, id text, query syntax) and connection errors
//   3  any other failure the daemon reports (internal error, ...)
#pragma once

#include <string_view>

#include "tocl/status.h"

namespace tocl::cli {

enum ExitCode : int {
  kExitOk = 0,
  kExitNoMatch = 1,
  kExitUsage = 2,
  kExitFailure = 3,
};

// The exit code for a failed `status` (kExitOk for an ok one).
ExitCode ExitCodeFor(const Status& status);

// Prints "tocl: <message>" on stderr and returns `code`.
int Fail(ExitCode code, std::string_view message);

// Prints `status` as one "tocl: ..." line on stderr and returns its exit code.
int Fail(const Status& status);

}  // namespace tocl::cli
