// Receive lanes (wire/lanes.h) between real processes over shm: N threads
// of one process (a runtime in the test process) each receive a stream from
// their own thread of a tocl-msg-worker, short messages sent from the
// sender's memory (the lanes' way), with N = 8 (a lane each) and N = 16
// (two per lane). Every message is checked: its checksum, exactly once, in
// order per pair. Meanwhile a receiver with nothing to do sleeps, and a
// late stream to it (from a second runtime here) still gets through at
// once, while the others run and once the whole process is idle.
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "daemon_harness.h"
#include "messaging_payload.h"
#include "messaging_support.h"
#include "status_assertions.h"
#include "wire/lanes.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

// The state letter of thread `tid` of this process (/proc: 'S' asleep,
// 'R' running, ...), '?' when it cannot be read.
char ThreadState(pid_t tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  const std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size() ? '?' : text[paren + 2];
}

// What the receiving threads found wrong (they may not use Catch2).
class Problems {
 public:
  void Add(std::string problem) {
    std::lock_guard lock(mu_);
    list_.push_back(std::move(problem));
  }
  std::vector<std::string> List() {
    std::lock_guard lock(mu_);
    return list_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> list_;  // guarded by mu_
};

// Receives messages `first` .. `end` - 1 on `self`, all from `from`, in
// order with intact payloads; `on_message(n)` as each arrives.
void ReceiveStream(Runtime& runtime, Gid self, Gid from, uint64_t first, uint64_t end,
                   Problems& problems, const std::function<void(uint64_t)>& on_message) {
  for (uint64_t n = first; n < end; ++n) {
    auto message = runtime.RecvFor(self, seconds(30));
    if (!message.ok()) {
      problems.Add(self.ToString() + " waiting for message " + std::to_string(n) + " (until " +
                   std::to_string(end) + "): " + message.status().ToString());
      return;
    }
    on_message(n);
    if (message->source() != from) {
      problems.Add(self.ToString() + " got a message from " + message->source().ToString() +
                   ", not from " + from.ToString());
      return;
    }
    if (std::string problem = CheckPayload(message->span(), from, self); !problem.empty()) {
      problems.Add(self.ToString() + ": " + problem);
      return;
    }
    const uint64_t seq = ReadPayloadHeader(message->span()).seq;
    if (seq != n) {
      problems.Add(self.ToString() + " from " + from.ToString() + ": message " +
                   std::to_string(seq) + " where " + std::to_string(n) + " was due (" +
                   (seq < n ? "duplicate or reordered" : "lost") + ")");
      return;
    }
  }
}

void LaneStreams(uint32_t receivers) {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto runtime = REQUIRE_VALUE(StartRuntime(daemon, "lanes-receiver", "shm"));
  std::vector<Gid> threads;
  for (uint32_t i = 0; i < receivers; ++i) {
    threads.push_back(REQUIRE_VALUE(runtime->EnrollThread("r" + std::to_string(i))));
  }
  // Two more: `late` shares its lane with streaming receivers (whoever
  // drains that lane delivers to it too); `warm` makes the late sender's
  // route before the measured stream starts.
  const Gid late = REQUIRE_VALUE(runtime->EnrollThread("late"));
  const Gid warm = REQUIRE_VALUE(runtime->EnrollThread("warm"));
  REQUIRE(std::count_if(threads.begin(), threads.end(), [&](Gid thread) {
            return wire::LaneOf(thread) == wire::LaneOf(late);
          }) == receivers / wire::kReceiveLanes);

  // The late stream's sender: a second runtime here, its route made (by a
  // message to `warm`) before any stream starts.
  auto late_sender = REQUIRE_VALUE(StartRuntime(daemon, "lanes-late-sender", "shm"));
  const Gid late_from = REQUIRE_VALUE(late_sender->EnrollThread("late-sender"));
  std::vector<std::byte> payload(64);
  FillPayload(payload, late_from, warm, 0);
  REQUIRE_OK(late_sender->Send(late_from, warm, 1, std::span<const std::byte>(payload)));
  REQUIRE_OK(runtime->RecvFor(warm, seconds(30)));

  // Each sending thread streams to its receiver: short messages from its
  // own memory, spread over at least 1.5 s so that the late stream starts
  // while they run.
  const uint64_t per_pair = MessageCount(20000, 2000);
  const uint64_t total = per_pair * receivers;
  MsgWorker sender = REQUIRE_VALUE(MsgWorker::Start(daemon, MsgWorkerArgs("source", "lanes-sender")
                                                                .Subsystems("shm")
                                                                .Threads(receivers)
                                                                .To(threads)
                                                                .Pairwise()
                                                                .Copy()
                                                                .Count(total)
                                                                .Size(100)
                                                                .RandomSize()
                                                                .DurationMs(1500)));
  REQUIRE(sender.threads().size() == receivers);

  // From here until the threads are joined: no REQUIRE.
  Problems problems;
  std::atomic<uint64_t> received{0};
  std::vector<std::thread> receiving;
  for (uint32_t i = 0; i < receivers; ++i) {
    receiving.emplace_back([&, i] {
      ReceiveStream(*runtime, threads[i], sender.threads()[i], 0, per_pair, problems,
                    [&](uint64_t) { ++received; });
    });
  }
  // The late receiver waits from the start. Its stream comes in two parts:
  // kBusy messages at once while the others run, then kIdle one at a time,
  // each once the whole process has been idle a while.
  constexpr uint64_t kBusy = 200;
  constexpr uint64_t kIdle = 5;
  std::vector<Clock::time_point> sent_at(kBusy + kIdle);
  std::vector<Clock::time_point> got_at(kBusy + kIdle);  // the late receiver's until joined
  std::atomic<uint64_t> late_got{0};
  std::atomic<pid_t> late_tid{0};
  std::thread late_receiver([&] {
    late_tid.store(gettid());
    ReceiveStream(*runtime, late, late_from, 0, kBusy + kIdle, problems, [&](uint64_t n) {
      got_at[n] = Clock::now();
      late_got.store(n + 1);
    });
  });
  // The late receiver has been asleep (in a futex or epoll) for `enough`.
  auto late_asleep = [&](Clock::duration enough) {
    auto since = Clock::time_point::max();
    return WaitUntil(
        [&] {
          if (late_tid.load() == 0 || ThreadState(late_tid.load()) != 'S') {
            since = Clock::time_point::max();
            return false;
          }
          since = std::min(since, Clock::now());
          return Clock::now() - since >= enough;
        },
        seconds(10), milliseconds(1));
  };
  Status late_sent;
  auto send_late = [&](uint64_t n) {
    if (!late_sent.ok()) return;
    payload.resize(40 + n % 60);
    FillPayload(payload, late_from, late, n);
    sent_at[n] = Clock::now();
    late_sent = late_sender->Send(late_from, late, 1, std::span<const std::byte>(payload));
  };

  // Part one, once the streams are under way and the late receiver sleeps.
  const bool under_way =
      WaitUntil([&] { return received.load() >= total / 10; }, seconds(120), milliseconds(1));
  const bool asleep_while_busy = late_asleep(Clock::duration::zero());
  const uint64_t received_at_start = received.load();
  for (uint64_t n = 0; n < kBusy; ++n) send_late(n);
  for (auto& thread : receiving) thread.join();
  Result<int> code = sender.child().Wait(seconds(120));
  // Part two: the streams are over, their sender gone.
  bool asleep_while_idle = true;
  for (uint64_t n = kBusy; n < kBusy + kIdle; ++n) {
    asleep_while_idle =
        asleep_while_idle &&
        WaitUntil([&] { return late_got.load() == n; }, seconds(30), milliseconds(1)) &&
        late_asleep(milliseconds(20));
    send_late(n);
  }
  late_receiver.join();

  INFO("sender:\n" << sender.Output());
  const std::vector<std::string> found = problems.List();
  std::string listed;
  for (size_t i = 0; i < found.size() && i < 20; ++i) listed += found[i] + "\n";
  INFO(found.size() << " problems:\n" << listed);
  CHECK(found.empty());
  REQUIRE_OK(late_sent);
  REQUIRE(under_way);
  REQUIRE(asleep_while_busy);
  REQUIRE(asleep_while_idle);
  // The late stream started while the others ran.
  CHECK(received_at_start < total);
  CHECK(received.load() == total);
  REQUIRE_OK(code);
  CHECK(*code == 0);
  CHECK(sender.LastValue("done", "errors") == 0u);
  CHECK(sender.LastValue("done", "sent") == total);

  // Exactly once: nothing more for anyone.
  for (Gid self : threads) {
    auto extra = runtime->RecvFor(self, milliseconds(100));
    INFO(self.ToString() << ": " << (extra.ok() ? "an extra message" : extra.status().ToString()));
    CHECK(extra.status().code() == StatusCode::kDeadlineExceeded);
  }
  CHECK(runtime->TryRecv(late).status().code() != StatusCode::kOk);
  REQUIRE(found.empty());

  // The sleeping receiver got its messages promptly. Busy: the first
  // message of part one wakes it, the others queue behind it. Idle: each
  // message wakes it; a wake that a lane post failed to give waits for the
  // poller's housekeeping (up to a second, measured ~0.98 s each), which no
  // scheduling delay makes the median of five.
  auto us = [](Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  };
  Clock::duration busy_worst{0};
  for (uint64_t n = 0; n < kBusy; ++n) busy_worst = std::max(busy_worst, got_at[n] - sent_at[n]);
  std::vector<Clock::duration> idle;
  for (uint64_t n = kBusy; n < kBusy + kIdle; ++n) idle.push_back(got_at[n] - sent_at[n]);
  std::sort(idle.begin(), idle.end());
  WARN(receivers << " receivers: the sleeping receiver's late stream took "
                 << us(got_at[0] - sent_at[0]) << " us for its first message while "
                 << received_at_start << " of " << total << " stream messages had arrived, "
                 << us(busy_worst) << " us at worst of " << kBusy
                 << "; once idle, one message took " << us(idle.front()) << " to "
                 << us(idle.back()) << " us (median " << us(idle[kIdle / 2]) << ")");
  CHECK(busy_worst < seconds(1));
  CHECK(idle.back() < seconds(1));
  CHECK(idle[kIdle / 2] < milliseconds(250));
}

TEST_CASE(
    "8 receiving threads, a lane each, get a stream each from threads of another process over "
    "shm, exactly once and in order, and a sleeping one wakes for a late stream",
    "[integration][msg][shm][lanes]") {
  LaneStreams(8);
}

TEST_CASE(
    "16 receiving threads, two per lane, get a stream each from threads of another process over "
    "shm, exactly once and in order, and a sleeping one wakes for a late stream",
    "[integration][msg][shm][lanes]") {
  LaneStreams(16);
}

}  // namespace
}  // namespace tocl::testing
