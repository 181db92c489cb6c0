// The soak driver's own lines on stdout: "soak HH:MM:SS.mmm: what", flushed,
// so that a long run's log lines up with the workers' "at" fields and the
// daemons' logs.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>

namespace tocl::testing {

// The local time of day, "HH:MM:SS.mmm" (the workers' "at" fields too).
inline std::string TimeOfDay() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  std::tm local{};
  localtime_r(&seconds, &local);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  return fmt::format("{:02}:{:02}:{:02}.{:03}", local.tm_hour, local.tm_min, local.tm_sec, millis);
}

inline void SoakSay(const std::string& line) {
  std::fputs(fmt::format("soak {}: {}\n", TimeOfDay(), line).c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace tocl::testing
