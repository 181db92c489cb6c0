// Logging controls. tocl logs through spdlog's default logger; applications
// that configure spdlog themselves keep their configuration.
#pragma once

#include <string_view>

#include "tocl/export.h"
#include "tocl/status.h"

namespace tocl {

// Sets the level of tocl's log lines: "trace", "debug", "info", "warn",
// "error", "critical" or "off". Anything else is InvalidArgument.
TOCL_EXPORT Status SetLogLevel(std::string_view level);

}  // namespace tocl
