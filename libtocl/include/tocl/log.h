// Logging controls. tocl writes its log lines to stderr, through a logger of
// its own (never spdlog's default logger, which stays the application's),
// at level `warn` unless $TOCL_LOG_LEVEL (read once, when tocl first logs)
// or SetLogLevel says otherwise. It prints nothing on stdout.
//
//   TOCL_LOG_LEVEL=info ./my_program       # or, in the program:
//   tocl::Status set = tocl::SetLogLevel("debug");
#pragma once

#include <string_view>

#include "tocl/export.h"
#include "tocl/status.h"

namespace tocl {

// Sets the level of tocl's log lines: "trace", "debug", "info", "warn",
// "error", "critical" or "off". Anything else is InvalidArgument (and the
// level stays). Overrides $TOCL_LOG_LEVEL. Thread-safe.
TOCL_EXPORT Status SetLogLevel(std::string_view level);

}  // namespace tocl
