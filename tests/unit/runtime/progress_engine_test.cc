// The progress engine's poll round without a daemon or networks: when a
// spinning poller looks at the fds (epoll costs a system call, so not every
// round) with a real reactor and a network whose rounds the test shapes.
#include "runtime/progress_engine.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "buffers/buffer_pool.h"
#include "core/posix.h"
#include "part_fixtures.h"
#include "runtime/epoll_reactor.h"
#include "subsystem/subsystem.h"

namespace tocl::runtime {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// A network whose every round reports `per_round` deliveries and lasts at
// least `round_time` (a burst of tcp frames in a loaded process).
class ShapedNetwork final : public FakeSubsystem {
 public:
  explicit ShapedNetwork(buffers::BufferPool& pool) : FakeSubsystem(pool, Network::kTcp) {}
  int Poll() override {
    polls.fetch_add(1, std::memory_order_relaxed);
    const auto until = Clock::now() + round_time;
    while (Clock::now() < until) {
    }
    return per_round;
  }

  int per_round = 0;
  std::chrono::microseconds round_time{0};
  std::atomic<int> polls{0};  // by any thread that holds the token
};

// The read end of a pipe in the reactor: counts what epoll reports.
struct PipeWatch final : subsystem::FdHandler {
  PipeWatch() { REQUIRE(pipe2(fds, O_NONBLOCK | O_CLOEXEC) == 0); }
  ~PipeWatch() override {
    close(fds[0]);
    close(fds[1]);
  }
  void Ring() { REQUIRE(write(fds[1], "x", 1) == 1); }
  void OnReady(uint32_t /*events*/) override {
    char byte;
    while (read(fds[0], &byte, 1) == 1) ++seen;
  }
  int fds[2] = {-1, -1};
  int seen = 0;
};

// PollOnce until the pipe's ring is seen; returns the rounds it took.
int RoundsUntilSeen(ProgressEngine& engine, PipeWatch& watch) {
  const int before = watch.seen;
  watch.Ring();
  const auto deadline = Clock::now() + 10s;
  int rounds = 0;
  while (watch.seen == before && Clock::now() < deadline) {
    engine.PollOnce();
    ++rounds;
  }
  REQUIRE(watch.seen == before + 1);
  return rounds;
}

// A progress engine with nothing to flush over one shaped network.
struct ShapedEngine {
  explicit ShapedEngine(ProgressEngine::Timing timing = {})
      : pool(Network::kTcp, 1, memory, budget),
        reactor(*EpollReactor::Create()),
        engine(
            *reactor, [] { return false; }, timing),
        network(pool) {
    engine.AddSubsystem(&network);
  }

  buffers::PoolBudget budget{size_t{1} << 20};
  buffers::AnonymousSlabMemory memory;
  buffers::BufferPool pool;
  std::unique_ptr<EpollReactor> reactor;
  ProgressEngine engine;
  ShapedNetwork network;
};

TEST_CASE(
    "a poller looks at the fds by work and time: at once after slow busy rounds, "
    "every 256th empty round",
    "[progress]") {
  ShapedEngine shaped;
  ProgressEngine& engine = shaped.engine;
  ShapedNetwork& network = shaped.network;
  PipeWatch watch;
  REQUIRE(shaped.reactor->Add(watch.fds[0], EPOLLIN, &watch).ok());
  REQUIRE(engine.TryAcquire());

  // Rounds that each delivered a burst and took longer than the poll
  // period: the next round looks (not the 256th).
  network.per_round = 1000;
  network.round_time = 100us;
  engine.PollOnce();
  CHECK(RoundsUntilSeen(engine, watch) <= 2);
  CHECK(RoundsUntilSeen(engine, watch) <= 2);

  // Empty quick rounds (a spinning shm poller): no system call each round.
  network.per_round = 0;
  network.round_time = 0us;
  CHECK(RoundsUntilSeen(engine, watch) >= 256);
  engine.Release();
}

TEST_CASE(
    "a receiver that stops polling to sleep hands the token to the progress thread at once, "
    "not after the idle hand-over",
    "[progress]") {
  // An hour: the progress thread never takes an idle token on its own in
  // this test, only one handed over.
  ShapedEngine shaped(ProgressEngine::Timing{.idle_hand_over = std::chrono::hours(1),
                                             .progress_check = std::chrono::hours(1)});
  ProgressEngine& engine = shaped.engine;
  ShapedNetwork& network = shaped.network;
  engine.Start();

  REQUIRE(engine.TryAcquire());
  engine.PollOnce();
  const int polled_by_receiver = network.polls.load();
  SECTION("handed over: the progress thread polls (and then sleeps in the reactor)") {
    engine.ReleaseToProgressThread();
    const auto deadline = Clock::now() + 10s;
    while (network.polls.load() == polled_by_receiver && Clock::now() < deadline) {
      std::this_thread::yield();
    }
    CHECK(network.polls.load() > polled_by_receiver);
    CHECK_FALSE(engine.TryAcquire());  // the progress thread holds it
  }
  SECTION("a plain release leaves the token to whoever comes") {
    engine.Release();
    CHECK(engine.TryAcquire());
    CHECK(network.polls.load() == polled_by_receiver);
    engine.Release();
  }
  engine.Stop();
}

TEST_CASE(
    "PollUntil polls while the token is free and waits for it while another thread holds it, "
    "until done or the deadline",
    "[progress]") {
  ShapedEngine shaped;
  ProgressEngine& engine = shaped.engine;
  ShapedNetwork& network = shaped.network;

  // Free token: done is reached by the caller's own rounds.
  CHECK(engine.PollUntil([&] { return network.polls.load() >= 3; }, Clock::now() + 10s));
  CHECK(network.polls.load() >= 3);

  // Never done: false at the deadline, not before.
  const auto start = Clock::now();
  CHECK_FALSE(engine.PollUntil([] { return false; }, start + 20ms));
  CHECK(Clock::now() - start >= 20ms);

  // Another thread holds the token: no round is made here.
  REQUIRE(engine.TryAcquire());
  const int before = network.polls.load();
  CHECK_FALSE(engine.PollUntil([] { return false; }, Clock::now() + 5ms));
  CHECK(network.polls.load() == before);

  // AcquireWithin: not while it is held, and once it is released.
  CHECK_FALSE(engine.AcquireWithin(5ms));
  std::thread releaser([&] { engine.Release(); });
  CHECK(engine.AcquireWithin(10s));
  releaser.join();
  engine.Release();
}

TEST_CASE("a send queued while the token's holder sleeps wakes it, not its deadline",
          "[progress]") {
  ShapedEngine shaped;
  ProgressEngine& engine = shaped.engine;
  REQUIRE(engine.TryAcquire());
  // The sleep's own bound is the housekeeping period (a second): woken
  // well before it, the holder was woken by the queued send.
  std::atomic<bool> woke{false};
  Clock::duration slept{};
  std::thread holder([&] {
    const auto start = Clock::now();
    engine.Sleep(start + 10s);
    slept = Clock::now() - start;
    woke = true;
  });
  const auto deadline = Clock::now() + 10s;
  while (!engine.HolderAsleep() && !woke.load() && Clock::now() < deadline)
    std::this_thread::yield();
  // Not a synchronisation: past the moment the holder looks at the queued
  // hint (a send queued before it sleeps makes it sleep 10 ms at most), into
  // its sleep proper.
  std::this_thread::sleep_for(50ms);
  engine.NoteQueued();
  holder.join();
  INFO("slept " << std::chrono::duration_cast<std::chrono::milliseconds>(slept).count() << " ms");
  CHECK(slept < 500ms);
  engine.Release();
}

TEST_CASE(
    "AcquireFor gets the token from a holder asleep in the reactor, and gives up at its deadline",
    "[progress]") {
  ShapedEngine shaped;
  ProgressEngine& engine = shaped.engine;
  Mailbox waiter{Gid()};

  // Held and never let go: false at the deadline, not before.
  REQUIRE(engine.TryAcquire());
  const auto start = Clock::now();
  CHECK_FALSE(engine.AcquireFor(waiter, start + 20ms));
  CHECK(Clock::now() - start >= 20ms);

  // A holder asleep (like the progress thread) lets go as soon as a waiter
  // comes, long before its sleep would end.
  std::thread holder([&] {
    engine.Sleep(Clock::now() + 10s);
    engine.Release();
  });
  const auto asked = Clock::now();
  CHECK(engine.AcquireFor(waiter, asked + 10s));
  CHECK(Clock::now() - asked < 500ms);
  holder.join();
  engine.Release();
}

}  // namespace
}  // namespace tocl::runtime
