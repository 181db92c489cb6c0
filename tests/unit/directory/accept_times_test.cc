#include "service/accept_times.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/proc_files.h"

namespace tocl::directory {
namespace {

TEST_CASE("an accepted connection's time is the boot time when it was recorded", "[accept]") {
  AcceptTimes times;
  CHECK_FALSE(times.AcceptedAt(7).has_value());
  const int64_t before = BootTimeNs();
  times.Accepted(7);
  const int64_t after = BootTimeNs();
  const std::optional<int64_t> accepted = times.AcceptedAt(7);
  REQUIRE(accepted.has_value());
  CHECK(*accepted >= before);
  CHECK(*accepted <= after);
  CHECK_FALSE(times.AcceptedAt(8).has_value());

  // The descriptor number accepted again (the first connection closed):
  // the new connection's time.
  times.Accepted(7);
  CHECK(times.AcceptedAt(7).value_or(0) >= after);
}

TEST_CASE("connections are recorded and read from several threads at once", "[accept]") {
  AcceptTimes times;
  constexpr int kThreads = 4;
  constexpr int kPerThread = 1000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&times, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const int fd = t * kPerThread + i;
        times.Accepted(fd);
        (void)times.AcceptedAt(fd);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int fd = 0; fd < kThreads * kPerThread; ++fd) {
    CHECK(times.AcceptedAt(fd).has_value());
  }
}

TEST_CASE("the boot time counts from where processes' start times do", "[accept]") {
  // This process started before now, on the clock /proc/<pid>/stat uses:
  // its start tick is no later than now's.
  const std::optional<std::string> stat = ReadProcFile(::getpid(), "stat");
  REQUIRE(stat.has_value());
  const std::optional<uint64_t> started = ParseStartTicks(*stat);
  REQUIRE(started.has_value());
  const uint64_t now = BootTicks(BootTimeNs());
  CHECK(*started <= now);
  // And not from another epoch: it started within the last hour of ticks.
  CHECK(now - *started < 3600u * static_cast<uint64_t>(::sysconf(_SC_CLK_TCK)));
}

}  // namespace
}  // namespace tocl::directory
