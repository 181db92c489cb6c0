#include "tocl/log.h"

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "core/logger.h"

namespace tocl {
namespace {

constexpr auto kDefaultLevel = spdlog::level::warn;

// spdlog's names for its levels; from_str maps anything else to "off", so
// only "off" itself may mean off.
std::optional<spdlog::level::level_enum> ParseLevel(std::string_view text) {
  const spdlog::level::level_enum parsed = spdlog::level::from_str(std::string(text));
  if (parsed == spdlog::level::off && text != "off") return std::nullopt;
  return parsed;
}

std::shared_ptr<spdlog::logger> NewDefaultLog() {
  // Not registered with spdlog: spdlog::set_level, set_pattern and
  // drop_all are the application's, for its own loggers.
  auto logger = std::make_shared<spdlog::logger>(
      "tocl", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
  logger->set_level(kDefaultLevel);
  const char* env = std::getenv("TOCL_LOG_LEVEL");
  if (env != nullptr && *env != '\0') {
    if (std::optional<spdlog::level::level_enum> level = ParseLevel(env)) {
      logger->set_level(*level);
    } else {
      logger->warn(
          "tocl: TOCL_LOG_LEVEL='{}' is not a level (trace, debug, info, warn, error, critical, "
          "off); using warn",
          env);
    }
  }
  return logger;
}

// The logger and its owner. `current` is what Log() reads on every line,
// without a lock; `owner` keeps it alive and changes only under `mu`.
struct LogSlot {
  LogSlot() : owner(NewDefaultLog()), current(owner.get()) {}
  std::mutex mu;
  std::shared_ptr<spdlog::logger> owner;  // guarded by mu
  // Release/acquire: a thread that reads the pointer sees the logger built.
  std::atomic<spdlog::logger*> current;
};

LogSlot& Slot() {
  // Never destroyed: threads of the application may log while statics go.
  static LogSlot* slot = new LogSlot();
  return *slot;
}

}  // namespace

spdlog::logger& Log() {
  return *Slot().current.load(std::memory_order_acquire);
}

std::shared_ptr<spdlog::logger> ReplaceLog(std::shared_ptr<spdlog::logger> logger) {
  LogSlot& slot = Slot();
  if (logger == nullptr) logger = NewDefaultLog();
  std::lock_guard lock(slot.mu);
  slot.current.store(logger.get(), std::memory_order_release);
  std::swap(slot.owner, logger);
  return logger;
}

Status SetLogLevel(std::string_view level) {
  std::optional<spdlog::level::level_enum> parsed = ParseLevel(level);
  if (!parsed) {
    return InvalidArgument(fmt::format(
        "unknown log level '{}' (trace, debug, info, warn, error, critical, off)", level));
  }
  Log().set_level(*parsed);
  return Status::Ok();
}

}  // namespace tocl
