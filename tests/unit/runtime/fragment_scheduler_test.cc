// The fragment scheduler of a long message, without networks: placement by
// earliest expected finish within a window per network, bandwidth learned
// from acknowledgements, failover of a silent or broken network and its
// retry after the timeouts.
#include "runtime/fragment_scheduler.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <vector>

namespace tocl::runtime {
namespace {

using namespace std::chrono_literals;
using Clock = FragmentScheduler::Clock;

constexpr uint64_t kFragment = 1000;
const Clock::time_point kStart = Clock::time_point() + 1h;

FragmentScheduler::Limits TestLimits(uint64_t window = kWindowFragments) {
  FragmentScheduler::Limits limits;
  limits.window = window;
  limits.fragment_timeout = 10ms;
  return limits;
}

// Posts everything Next offers this round (every post succeeds); returns
// the fragments each network took.
std::vector<std::vector<uint64_t>> PlaceRound(FragmentScheduler& scheduler,
                                              std::vector<RailHealth>& rails,
                                              Clock::time_point now) {
  std::vector<std::vector<uint64_t>> placed(rails.size());
  (void)scheduler.StartRound(rails, now, false);
  while (const auto placement = scheduler.Next(rails)) {
    placed[placement->rail].push_back(placement->index);
    scheduler.Posted(*placement, now);
  }
  return placed;
}

void AckEach(FragmentScheduler& scheduler, const std::vector<uint64_t>& fragments,
             Clock::time_point now) {
  for (uint64_t index : fragments) {
    CHECK(scheduler.Acknowledge(scheduler.Offset(index), kFragment, now) == 1);
  }
}

TEST_CASE("fragments alternate over two networks of unknown bandwidth", "[fragments]") {
  FragmentScheduler scheduler(10 * kFragment, kFragment, 2, TestLimits());
  std::vector<RailHealth> rails(2);
  const auto placed = PlaceRound(scheduler, rails, kStart);
  CHECK(placed[0] == std::vector<uint64_t>{0, 2, 4, 6, 8});
  CHECK(placed[1] == std::vector<uint64_t>{1, 3, 5, 7, 9});
  // Everything is placed: the next round offers nothing again.
  (void)scheduler.StartRound(rails, kStart, false);
  CHECK_FALSE(scheduler.Next(rails).has_value());
}

TEST_CASE("two networks of equal learned bandwidth split a message evenly", "[fragments]") {
  FragmentScheduler scheduler(64 * kFragment, kFragment, 2, TestLimits());
  std::vector<RailHealth> rails(2);
  rails[0].bandwidth = rails[1].bandwidth = 1e9;
  const auto placed = PlaceRound(scheduler, rails, kStart);
  CHECK(placed[0].size() == 32);
  CHECK(placed[1].size() == 32);
}

TEST_CASE("the last fragment is shorter and the message is done when all are acknowledged",
          "[fragments]") {
  FragmentScheduler scheduler(2 * kFragment + 10, kFragment, 1, TestLimits());
  CHECK(scheduler.count() == 3);
  CHECK(scheduler.Length(2) == 10);
  std::vector<RailHealth> rails(1);
  (void)PlaceRound(scheduler, rails, kStart);
  // One acknowledgement for a run of fragments; a repeat counts nothing.
  CHECK(scheduler.Acknowledge(0, 2 * kFragment, kStart) == 2);
  CHECK(scheduler.Acknowledge(0, kFragment, kStart) == 0);
  CHECK(scheduler.Acknowledge(5, kFragment, kStart) == 0);  // not at a fragment's start
  CHECK_FALSE(scheduler.done());
  CHECK(scheduler.Acknowledge(2 * kFragment, 10, kStart) == 1);
  CHECK(scheduler.done());
  CHECK(scheduler.acked() == 3);
}

TEST_CASE("a window per network limits what is in flight, and acknowledgements open it",
          "[fragments]") {
  FragmentScheduler scheduler(20 * kFragment, kFragment, 2, TestLimits(/*window=*/3));
  std::vector<RailHealth> rails(2);
  auto placed = PlaceRound(scheduler, rails, kStart);
  CHECK(placed[0].size() == 3);
  CHECK(placed[1].size() == 3);
  AckEach(scheduler, {placed[0][0], placed[0][1]}, kStart + 1ms);
  placed = PlaceRound(scheduler, rails, kStart + 1ms);
  CHECK(placed[0].size() == 2);
  CHECK(placed[1].empty());
}

TEST_CASE("a full window on the fastest network waits for it rather than use a slower one",
          "[fragments]") {
  FragmentScheduler scheduler(40 * kFragment, kFragment, 2, TestLimits(/*window=*/4));
  std::vector<RailHealth> rails(2);
  rails[0].bandwidth = 100e9;  // so fast that the other is never earlier
  rails[1].bandwidth = 1e6;
  const auto placed = PlaceRound(scheduler, rails, kStart);
  CHECK(placed[0].size() == 4);
  CHECK(placed[1].empty());
}

TEST_CASE("a network that cannot take a fragment now leaves it to the others this round",
          "[fragments]") {
  FragmentScheduler scheduler(4 * kFragment, kFragment, 2, TestLimits());
  std::vector<RailHealth> rails(2);
  (void)scheduler.StartRound(rails, kStart, false);
  auto first = scheduler.Next(rails);
  REQUIRE(first.has_value());
  CHECK(first->rail == 0);
  scheduler.Full(0);
  std::vector<uint64_t> on_one;
  for (int i = 0; i < 2; ++i) {
    const auto placement = scheduler.Next(rails);
    REQUIRE(placement.has_value());
    CHECK(placement->rail == 1);
    on_one.push_back(placement->index);
    scheduler.Posted(*placement, kStart);
  }
  CHECK(on_one == std::vector<uint64_t>{0, 1});
  // The next round offers it again (network 1 has two in flight, 0 none).
  (void)scheduler.StartRound(rails, kStart, false);
  const auto again = scheduler.Next(rails);
  REQUIRE(again.has_value());
  CHECK(again->rail == 0);
  CHECK(again->index == 2);
}

TEST_CASE("once measured, a network twice as fast carries twice the fragments", "[fragments]") {
  FragmentScheduler scheduler(200 * kFragment, kFragment, 2, TestLimits());
  std::vector<RailHealth> rails(2);
  auto placed = PlaceRound(scheduler, rails, kStart);
  REQUIRE(placed[0].size() == 32);
  REQUIRE(placed[1].size() == 32);
  // Network 0 acknowledges 8 fragments in 1 ms, network 1 in 2 ms.
  const std::vector<uint64_t> fast(placed[0].begin(), placed[0].begin() + 8);
  const std::vector<uint64_t> slow(placed[1].begin(), placed[1].begin() + 8);
  AckEach(scheduler, fast, kStart + 1ms);
  AckEach(scheduler, slow, kStart + 2ms);
  CHECK(scheduler.Measured(0) == Approx(8e6));
  CHECK(scheduler.Measured(1) == Approx(4e6));
  // Every window acknowledged: the next round fills from equal in-flight.
  AckEach(scheduler, std::vector<uint64_t>(placed[0].begin() + 8, placed[0].end()), kStart + 4ms);
  AckEach(scheduler, std::vector<uint64_t>(placed[1].begin() + 8, placed[1].end()), kStart + 8ms);
  CHECK(scheduler.Measured(0) == Approx(8e6));  // 32 fragments in 4 ms
  CHECK(scheduler.Measured(1) == Approx(4e6));  // 32 in 8 ms
  placed = PlaceRound(scheduler, rails, kStart + 8ms);
  CHECK(placed[0].size() == 32);  // the window limits the fast one
  CHECK(placed[1].size() == 16);  // half as many
}

TEST_CASE("a measurement needs enough acknowledged fragments, and is learned for the next message",
          "[fragments]") {
  FragmentScheduler scheduler(10 * kFragment, kFragment, 1, TestLimits());
  std::vector<RailHealth> rails(1);
  const auto placed = PlaceRound(scheduler, rails, kStart);
  AckEach(scheduler, {placed[0][0], placed[0][1], placed[0][2]}, kStart + 1ms);
  CHECK(scheduler.Measured(0) == 0);  // 3 of kMeasuredAfter
  CHECK(scheduler.Learned(0, 5e6) == 5e6);
  AckEach(scheduler, {placed[0][3]}, kStart + 1ms);
  CHECK(scheduler.Measured(0) == Approx(4e6));
  CHECK(scheduler.Learned(0, 0) == Approx(4e6));
  CHECK(scheduler.Learned(0, 2e6) == Approx(3e6));  // half the old, half the new
}

TEST_CASE("a silent network fails and its unacknowledged fragments go over the other",
          "[fragments]") {
  FragmentScheduler scheduler(8 * kFragment, kFragment, 2, TestLimits());
  std::vector<RailHealth> rails(2);
  auto placed = PlaceRound(scheduler, rails, kStart);
  REQUIRE(placed[1] == std::vector<uint64_t>{1, 3, 5, 7});
  AckEach(scheduler, placed[0], kStart + 1ms);
  AckEach(scheduler, {1}, kStart + 1ms);

  // Within fragment_timeout nothing happens; after it, network 1 fails.
  CHECK(scheduler.StartRound(rails, kStart + 10ms, false).empty());
  CHECK(scheduler.StartRound(rails, kStart + 12ms, /*congested=*/true).empty());
  const auto failures = scheduler.StartRound(rails, kStart + 12ms, false);
  REQUIRE(failures.size() == 1);
  CHECK(failures[0].rail == 1);
  CHECK_FALSE(failures[0].broken);
  CHECK(failures[0].unacknowledged == 3);
  CHECK(failures[0].news);
  CHECK(rails[1].failed);
  CHECK(rails[1].retry_at == kStart + 12ms + 10 * 10ms);

  // A late acknowledgement of one of them: it is not sent again.
  CHECK(scheduler.Acknowledge(scheduler.Offset(5), kFragment, kStart + 12ms) == 1);
  std::vector<FragmentScheduler::Placement> resent;
  while (const auto placement = scheduler.Next(rails)) {
    resent.push_back(*placement);
    scheduler.Posted(*placement, kStart + 12ms);
  }
  REQUIRE(resent.size() == 2);
  CHECK(resent[0].index == 3);
  CHECK(resent[1].index == 7);
  for (const auto& placement : resent) {
    CHECK(placement.rail == 0);
    CHECK(placement.resent);
  }
  AckEach(scheduler, {3, 7}, kStart + 13ms);
  CHECK(scheduler.done());
}

TEST_CASE("a broken network fails at once, is reported once, and no network left places nothing",
          "[fragments]") {
  FragmentScheduler scheduler(4 * kFragment, kFragment, 2, TestLimits());
  std::vector<RailHealth> rails(2);
  (void)PlaceRound(scheduler, rails, kStart);
  rails[0].broken = true;
  auto failures = scheduler.StartRound(rails, kStart + 1ms, false);
  REQUIRE(failures.size() == 1);
  CHECK(failures[0].broken);
  CHECK(failures[0].unacknowledged == 2);
  CHECK(failures[0].news);
  // Found again the next round, with nothing left to give back: no news.
  failures = scheduler.StartRound(rails, kStart + 2ms, false);
  REQUIRE(failures.size() == 1);
  CHECK_FALSE(failures[0].news);

  rails[1].broken = true;
  (void)scheduler.StartRound(rails, kStart + 3ms, false);
  CHECK(rails[0].failed);
  CHECK(rails[1].failed);
  CHECK_FALSE(scheduler.Next(rails).has_value());
}

TEST_CASE("a broken network stays failed with no news after retry_after_timeouts", "[fragments]") {
  const FragmentScheduler::Limits limits = TestLimits();
  FragmentScheduler scheduler(4 * kFragment, kFragment, 2, limits);
  std::vector<RailHealth> rails(2);
  rails[0].broken = true;
  auto failures = scheduler.StartRound(rails, kStart, false);
  REQUIRE(failures.size() == 1);
  CHECK(failures[0].news);
  CHECK(rails[0].failed);
  CHECK(rails[0].retry_at == Clock::time_point::max());

  // Long after a silent network would be tried again, the broken one is
  // not: found again, no news, and nothing placed on it.
  const Clock::time_point later =
      kStart + 2 * limits.retry_after_timeouts * limits.fragment_timeout;
  failures = scheduler.StartRound(rails, later, false);
  REQUIRE(failures.size() == 1);
  CHECK(failures[0].broken);
  CHECK_FALSE(failures[0].news);
  CHECK(rails[0].failed);
  CHECK_FALSE(rails[0].UsableAt(later));
  while (const auto placement = scheduler.Next(rails)) {
    CHECK(placement->rail == 1);
    scheduler.Posted(*placement, later);
  }
}

TEST_CASE("a failed network is used again once its retry time has come", "[fragments]") {
  FragmentScheduler scheduler(8 * kFragment, kFragment, 2, TestLimits());
  std::vector<RailHealth> rails(2);
  rails[1].failed = true;
  rails[1].retry_at = kStart + 100ms;
  auto placed = PlaceRound(scheduler, rails, kStart);
  CHECK(placed[0].size() == 8);
  CHECK(placed[1].empty());
  AckEach(scheduler, placed[0], kStart + 1ms);
  CHECK(scheduler.done());

  FragmentScheduler next(8 * kFragment, kFragment, 2, TestLimits());
  placed = PlaceRound(next, rails, kStart + 99ms);
  CHECK(placed[1].empty());
  CHECK(rails[1].failed);
  FragmentScheduler later(8 * kFragment, kFragment, 2, TestLimits());
  placed = PlaceRound(later, rails, kStart + 100ms);
  CHECK_FALSE(rails[1].failed);
  CHECK(placed[0].size() == 4);
  CHECK(placed[1].size() == 4);
}

}  // namespace
}  // namespace tocl::runtime
