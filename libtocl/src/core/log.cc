#include "tocl/log.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace tocl {

Status SetLogLevel(std::string_view level) {
  spdlog::level::level_enum parsed = spdlog::level::from_str(std::string(level));
  // from_str maps unknown names to "off"; only "off" itself may mean off.
  if (parsed == spdlog::level::off && level != "off") {
    return InvalidArgument(fmt::format(
        "unknown log level '{}' (trace, debug, info, warn, error, critical, off)", level));
  }
  spdlog::set_level(parsed);
  return Status::Ok();
}

}  // namespace tocl
