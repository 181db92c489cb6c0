// The library's own logger. Every line libtocl writes goes through Log(),
// never through spdlog's default logger: that one belongs to the
// application (it writes to stdout, and the application may have given it
// sinks and a level of its own).
//
//   Log().warn("tocl: cannot open a {} route to {}: {}", name, peer, why);
//
// Log() starts as a logger named "tocl" that writes to stderr at level
// `warn`, or at $TOCL_LOG_LEVEL when that is set (read once, at first use);
// tocl::SetLogLevel (tocl/log.h) changes its level.
//
// Threading: Log() may be called from any thread. ReplaceLog swaps the
// logger for later calls; a thread that is logging meanwhile finishes with
// the old one, so the old one must outlive such lines (the daemons replace
// it once, before their threads start; tests while no other thread logs).
#pragma once

#include <spdlog/logger.h>

#include <memory>

namespace tocl {

spdlog::logger& Log();

// Makes `logger` the library's logger (null: a new default one, as at
// start) and returns the previous one. Daemons give the library their own
// logger, so that its lines share their pattern, sink and --log-level;
// tests give it one that captures lines.
std::shared_ptr<spdlog::logger> ReplaceLog(std::shared_ptr<spdlog::logger> logger);

}  // namespace tocl
