// The library's logger (core/logger.h, tocl/log.h): its own, apart from
// spdlog's default logger (the application's), at warn unless
// $TOCL_LOG_LEVEL or SetLogLevel say otherwise.
#include "tocl/log.h"

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>
#include <memory>
#include <sstream>
#include <string>

#include "core/logger.h"
#include "scoped_environment.h"

namespace tocl {
namespace {

// A logger writing into a string, at `level`.
std::shared_ptr<spdlog::logger> StringLogger(std::ostringstream& out,
                                             spdlog::level::level_enum level) {
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  sink->set_pattern("%l %v");
  auto logger = std::make_shared<spdlog::logger>("capture", sink);
  logger->set_level(level);
  return logger;
}

// Puts back spdlog's default logger and the library's logger.
struct RestoreLoggers {
  std::shared_ptr<spdlog::logger> application = spdlog::default_logger();
  std::shared_ptr<spdlog::logger> library = ReplaceLog(nullptr);
  ~RestoreLoggers() {
    spdlog::set_default_logger(application);
    ReplaceLog(library);
  }
};

TEST_CASE("tocl's lines never reach the application's spdlog default logger", "[log]") {
  RestoreLoggers restore;
  std::ostringstream application_lines, library_lines;
  spdlog::set_default_logger(StringLogger(application_lines, spdlog::level::trace));
  ReplaceLog(StringLogger(library_lines, spdlog::level::info));

  Log().warn("tocl: a warning");
  Log().info("tocl: some news");
  Log().debug("tocl: a detail");
  spdlog::info("the application's own line");
  Log().flush();
  spdlog::default_logger()->flush();
  CHECK(library_lines.str() == "warning tocl: a warning\ninfo tocl: some news\n");
  CHECK(application_lines.str() == "info the application's own line\n");

  // The application setting spdlog's level leaves tocl's alone, and back.
  spdlog::set_level(spdlog::level::trace);
  CHECK(Log().level() == spdlog::level::info);
  REQUIRE(SetLogLevel("error").ok());
  CHECK(Log().level() == spdlog::level::err);
  CHECK(spdlog::default_logger()->level() == spdlog::level::trace);
}

TEST_CASE("SetLogLevel takes spdlog's level names and refuses others, keeping the level", "[log]") {
  RestoreLoggers restore;
  for (const char* name : {"trace", "debug", "info", "warn", "error", "critical", "off"}) {
    INFO(name);
    CHECK(SetLogLevel(name).ok());
    CHECK(Log().level() == spdlog::level::from_str(name));
  }
  REQUIRE(SetLogLevel("warn").ok());
  Status refused = SetLogLevel("loud");
  CHECK(refused.code() == StatusCode::kInvalidArgument);
  CHECK(refused.message().find("unknown log level 'loud'") != std::string::npos);
  CHECK(Log().level() == spdlog::level::warn);
}

TEST_CASE("the library's logger starts at warn, or at TOCL_LOG_LEVEL when that is a level",
          "[log]") {
  RestoreLoggers restore;
  testing::ScopedEnvironment environment;
  environment.Unset("TOCL_LOG_LEVEL");
  ReplaceLog(nullptr);  // a new default one reads the variable again
  CHECK(Log().level() == spdlog::level::warn);
  CHECK(Log().name() == "tocl");
  environment.Set("TOCL_LOG_LEVEL", "info");
  ReplaceLog(nullptr);
  CHECK(Log().level() == spdlog::level::info);
  environment.Set("TOCL_LOG_LEVEL", "chatty");
  ReplaceLog(nullptr);
  CHECK(Log().level() == spdlog::level::warn);
}

}  // namespace
}  // namespace tocl
