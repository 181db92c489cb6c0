// No message waits for a timer (issue #18): a new process's first message
// to a receiver that has been idle (its receiving thread asleep in RecvFor,
// or a message handler's idle pool asleep; its progress thread asleep), and
// an exit notice to a thread blocked in RecvFor, arrive within
// milliseconds, over shm and over tcp.
//
// The bounds are correctness bounds, not speed targets: the issue measured
// a first message over shm 500 to 1,000 ms late (it waited, queued, for its
// sender's once-a-second housekeeping) and a notice to a blocked receiver
// on a one-second tick (p50 314 ms, p99 987 ms). They are on the median and
// the 90th percentile, with room for a loaded machine (see the constants
// below); each case prints p50, p90, p99 and the maximum (`ctest -V`). A
// first message is timed from the sender's Send call and from its return
// (the message on its way: what no timer may hold up).
#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon_harness.h"
#include "messaging_support.h"
#include "status_assertions.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

// How long a receiver must have had nothing before a sample: past its eager
// spell (100 ms of polling for itself after its last message), so that it
// sleeps on its mailbox and the progress thread sleeps in the reactor.
constexpr auto kIdleBefore = milliseconds(150);

int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             steady_clock::now().time_since_epoch())
      .count();
}

// Delays in milliseconds.
struct Latencies {
  std::vector<double> ms;

  // The nearest-rank percentile (p in 0..1).
  double Percentile(double p) const {
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
    return sorted.at(std::clamp<size_t>(rank, 1, sorted.size()) - 1);
  }
  std::string Summary(std::string_view what) const {
    return fmt::format("{}: {} samples, p50 {:.2f} ms, p90 {:.2f} ms, p99 {:.2f} ms, max {:.2f} ms",
                       what, ms.size(), Percentile(0.5), Percentile(0.9), Percentile(0.99),
                       Percentile(1.0));
  }
};

// Records when each stamped message (tocl-msg-worker --role stamp) was
// sent and when it arrived: either a receiving thread that stays in one long
// RecvFor between messages (a message with the stop tag ends it), or a
// message handler on the thread (tocl/handler.h: its idle pool waits as a
// blocked Recv does).
class StampReceiver {
 public:
  static constexpr Tag kStampTag = 5;
  static constexpr Tag kStopTag = 6;
  enum class By { kRecv, kHandler };

  struct Arrival {
    int64_t sent_at = 0;  // steady ns, read by the sender before its Send
    int64_t arrived_at = 0;
  };

  StampReceiver(Runtime& runtime, Gid self, By by = By::kRecv) : runtime_(runtime), self_(self) {
    if (by == By::kRecv) {
      thread_ = std::thread([this] { Run(); });
      return;
    }
    Result<HandlerRegistration> handler =
        runtime_.RegisterHandler(self_, Gid(), kAnyTag, [this](HandlerContext& call) {
          const int64_t now = SteadyNanos();
          std::lock_guard lock(mu_);
          Record(call.message, now);
        });
    std::lock_guard lock(mu_);
    if (handler.ok()) {
      handler_ = handler->id;
    } else {
      error_ = handler.status().ToString();
    }
  }
  ~StampReceiver() {
    if (!thread_.joinable()) {
      if (handler_ != 0) (void)runtime_.CancelHandler(handler_);
      return;
    }
    // From another thread of the process: the receiver is never left waiting.
    const Gid stopper = runtime_.EnrollThread("stopper").value_or(Gid());
    if (stopper.is_null() || !runtime_.Send(stopper, self_, kStopTag, Bytes("stop")).ok()) {
      (void)runtime_.Shutdown(milliseconds(0));
    }
    thread_.join();
  }

  std::vector<Arrival> arrivals() {
    std::lock_guard lock(mu_);
    return arrivals_;
  }
  steady_clock::time_point last_arrival() {
    std::lock_guard lock(mu_);
    return last_arrival_;
  }
  std::string error() {
    std::lock_guard lock(mu_);
    return error_;
  }

 private:
  void Run() {
    for (;;) {
      auto message = runtime_.RecvFor(self_, seconds(120));
      const int64_t now = SteadyNanos();
      std::lock_guard lock(mu_);
      if (!message.ok()) {
        error_ = message.status().ToString();
        return;
      }
      if (message->tag() == kStopTag || !Record(*message, now)) return;
    }
  }

  // Under mu_. False (and error_ set) for a message that is not a stamp.
  bool Record(const Buffer& message, int64_t arrived_at) {
    Arrival arrival{.sent_at = 0, .arrived_at = arrived_at};
    if (message.tag() != kStampTag || message.size() < sizeof(arrival.sent_at)) {
      error_ =
          fmt::format("an unexpected message: tag {}, {} bytes", message.tag(), message.size());
      return false;
    }
    std::memcpy(&arrival.sent_at, message.data(), sizeof(arrival.sent_at));
    arrivals_.push_back(arrival);
    last_arrival_ = steady_clock::now();
    return true;
  }

  Runtime& runtime_;
  const Gid self_;
  std::mutex mu_;
  std::vector<Arrival> arrivals_;                                // guarded by mu_
  steady_clock::time_point last_arrival_ = steady_clock::now();  // guarded by mu_
  std::string error_;                                            // guarded by mu_
  HandlerId handler_ = 0;                                        // By::kHandler
  std::thread thread_;                                           // By::kRecv
};

struct FirstMessageLatencies {
  Latencies from_call;    // from the call of the sender's first Send
  Latencies from_return;  // from its return: the message on its way
};

// `samples` new processes, one after the other, each sending one message
// (its first, over a route it opens then) to an idle receiver here.
FirstMessageLatencies FirstMessages(const std::string& network, int samples,
                                    StampReceiver::By by = StampReceiver::By::kRecv) {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto runtime = REQUIRE_VALUE(StartRuntime(daemon, "idle-receiver", network));
  const Gid receiver = REQUIRE_VALUE(runtime->EnrollThread("receiver"));
  StampReceiver stamps(*runtime, receiver, by);
  auto start_sender = [&](int i) {
    return MsgWorker::Start(daemon, MsgWorkerArgs("stamp", fmt::format("first-{}", i))
                                        .Subsystems(network)
                                        .To({receiver})
                                        .WithTag(StampReceiver::kStampTag)
                                        .Count(1)
                                        .PauseBefore(0)  // its one message waits for the go
                                        .Size(64));
  };
  FirstMessageLatencies latencies;
  // The next sender starts while the receiver goes idle after the last one.
  std::optional<MsgWorker> next = REQUIRE_VALUE(start_sender(0));
  for (int i = 0; i < samples; ++i) {
    MsgWorker sender = std::move(*next);
    REQUIRE(WaitUntil([&] { return steady_clock::now() - stamps.last_arrival() > kIdleBefore; },
                      seconds(10), milliseconds(5)));
    // Its message goes when stdin closes: now.
    Result<int> code = sender.Finish(seconds(30));
    INFO("sender " << i << ":\n" << sender.Output());
    REQUIRE(code.value_or(-1) == 0);
    const bool arrived =
        WaitUntil([&] { return stamps.arrivals().size() == static_cast<size_t>(i) + 1; },
                  seconds(10), milliseconds(1));
    INFO("receiver: " << stamps.error());
    REQUIRE(arrived);
    const StampReceiver::Arrival arrival = stamps.arrivals().back();
    const auto returned_at = static_cast<int64_t>(sender.LastValue("sent", "t").value_or(0));
    REQUIRE(returned_at != 0);
    latencies.from_call.ms.push_back(static_cast<double>(arrival.arrived_at - arrival.sent_at) /
                                     1e6);
    latencies.from_return.ms.push_back(static_cast<double>(arrival.arrived_at - returned_at) / 1e6);
    if (i + 1 < samples) next = REQUIRE_VALUE(start_sender(i + 1));
  }
  CHECK(stamps.error().empty());
  return latencies;
}

enum class Ending { kExits, kKilled };

// `samples` victims (idle tocl-msg-workers), one after the other, each
// watched by a thread here that is blocked in RecvFor for the notice when
// the victim exits (Shutdown, then the end of main) or is killed with
// SIGKILL. A delay runs from the kill, or from the victim's "stopping" line
// (the start of its Shutdown), to the return of RecvFor.
Latencies NoticesToBlockedReceiver(Ending ending, int samples) {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto runtime = REQUIRE_VALUE(StartRuntime(daemon, "watcher"));
  const Gid watcher = REQUIRE_VALUE(runtime->EnrollThread("watcher"));
  Latencies latencies;
  for (int i = 0; i < samples; ++i) {
    MsgWorker victim =
        REQUIRE_VALUE(MsgWorker::Start(daemon, MsgWorkerArgs("idle", fmt::format("victim-{}", i))));
    const Tag tag = 100 + static_cast<Tag>(i);
    REQUIRE_OK(runtime->Notify(watcher, victim.process(), tag));
    std::atomic<bool> waiting{false};
    Result<Buffer> got = Internal("RecvFor did not return");
    int64_t got_at = 0;
    {
      std::jthread receiver([&] {
        waiting = true;
        got = runtime->RecvFor(watcher, seconds(30), victim.process(), tag);
        got_at = SteadyNanos();
      });
      REQUIRE(WaitUntil([&] { return waiting.load(); }, seconds(10), milliseconds(1)));
      // Not a synchronisation: the case under test is a receiver that has
      // been blocked for a while (past its eager spell, asleep on its
      // mailbox), as in the issue.
      std::this_thread::sleep_for(kIdleBefore);
      int64_t gone_at = 0;
      if (ending == Ending::kKilled) {
        gone_at = SteadyNanos();
        REQUIRE(victim.child().Kill().value_or(-1) == 128 + SIGKILL);
      } else {
        Result<int> code = victim.Finish(seconds(30));
        INFO("victim:\n" << victim.Output());
        REQUIRE(code.value_or(-1) == 0);
        gone_at = static_cast<int64_t>(victim.LastValue("stopping", "t").value_or(0));
        REQUIRE(gone_at != 0);
      }
      receiver.join();
      Buffer notice = REQUIRE_VALUE(std::move(got));
      CHECK(REQUIRE_VALUE(ParseExitNotice(notice)).gid == victim.process());
      latencies.ms.push_back(static_cast<double>(got_at - gone_at) / 1e6);
    }
  }
  return latencies;
}

// What is measured, on two cores: a first message arrives p50 0.06 ms
// (shm) and 0.4 ms (tcp: connect and handshake) after its Send returned,
// p99 under 2 ms with a load average of 28; from the Send call p50 2 ms
// (a first Send looks its destination up in the directory: two round
// trips to the daemon), p99 3-5 ms on a quiet machine. A notice to a
// blocked receiver comes p50 3.5-5 ms, p99 5-12 ms after the kill or the
// victim's Shutdown. With other suites' soak runs on the same two cores
// (load average 33) every tail grows to hundreds of ms (notices p50 41 ms,
// p90 260 ms; first messages p99 190-290 ms), so the checks are on the
// median and the 90th percentile, with bounds a waiting timer breaks and
// such a load does not: the timers held every first message or
// notice for hundreds of ms (p50 314 ms). The 5 ms holds for the
// median from the Send's return, and for the p99 on an unloaded machine
// (printed each run).
constexpr double kFirstMessageP50Ms = 5.0;
constexpr double kFirstMessageP90Ms = 50.0;
// From the call, two directory round trips come first: under load (a load
// average of 19, parallel builds) their median reached 9-11 ms.
constexpr double kFirstSendP50Ms = 50.0;
constexpr double kFirstSendP90Ms = 100.0;
constexpr double kNoticeP50Ms = 100.0;
constexpr double kNoticeP90Ms = 500.0;
constexpr int kFirstMessageSamples = 100;
constexpr int kNoticeSamples = 40;
// Enough for a p90 (the Recv cases have run the same path 100 times).
constexpr int kHandlerSamples = 40;

// Under ThreadSanitizer the connect, the handshake and the directory round
// trips run slower: measured from the Send's return, p50 17 ms over tcp
// (3.4 times its 5 ms bound) and 5.1 ms over shm. The first-message bounds
// stretch 5 times there, still well below the hundreds of milliseconds a
// waiting timer costs.
constexpr double kSanitizedStretch = 5.0;

void CheckFirstMessages(const std::string& network, StampReceiver::By by = StampReceiver::By::kRecv,
                        int samples = kFirstMessageSamples) {
  const FirstMessageLatencies latencies = FirstMessages(network, samples, by);
  const double stretch = SanitizedBuild() ? kSanitizedStretch : 1.0;
  const char* to = by == StampReceiver::By::kHandler ? " to a handler" : "";
  const std::string from_call = latencies.from_call.Summary(
      fmt::format("first message over {}{}, from the Send call", network, to));
  const std::string from_return = latencies.from_return.Summary(
      fmt::format("first message over {}{}, from the Send's return", network, to));
  fmt::print("{}\n{}\n", from_call, from_return);
  INFO(from_call << "\n" << from_return);
  CHECK(latencies.from_return.Percentile(0.5) <= stretch * kFirstMessageP50Ms);
  CHECK(latencies.from_return.Percentile(0.9) <= stretch * kFirstMessageP90Ms);
  CHECK(latencies.from_call.Percentile(0.5) <= stretch * kFirstSendP50Ms);
  CHECK(latencies.from_call.Percentile(0.9) <= stretch * kFirstSendP90Ms);
}

void CheckNotices(Ending ending, std::string_view what) {
  const Latencies latencies = NoticesToBlockedReceiver(ending, kNoticeSamples);
  const std::string summary = latencies.Summary(what);
  fmt::print("{}\n", summary);
  INFO(summary);
  CHECK(latencies.Percentile(0.5) <= kNoticeP50Ms);
  CHECK(latencies.Percentile(0.9) <= kNoticeP90Ms);
}

TEST_CASE("a new process's first message over shm wakes an idle receiver at once",
          "[integration][msg][shm][latency]") {
  CheckFirstMessages("shm");
}

TEST_CASE("a new process's first message over tcp wakes an idle receiver at once",
          "[integration][msg][tcp][latency]") {
  CheckFirstMessages("tcp");
}

// A handler's idle pool is woken by the arrival as a blocked Recv is (the
// lead waits in the same Await; a claim rings its bell), never by a tick.
TEST_CASE("a new process's first message over shm wakes an idle message handler at once",
          "[integration][msg][shm][latency][handlers]") {
  CheckFirstMessages("shm", StampReceiver::By::kHandler, kHandlerSamples);
}

TEST_CASE("a new process's first message over tcp wakes an idle message handler at once",
          "[integration][msg][tcp][latency][handlers]") {
  CheckFirstMessages("tcp", StampReceiver::By::kHandler, kHandlerSamples);
}

TEST_CASE("a thread blocked in RecvFor gets the notice of a process killed with SIGKILL at once",
          "[integration][msg][notify][latency]") {
  CheckNotices(Ending::kKilled, "notice of a SIGKILL to a blocked RecvFor");
}

TEST_CASE("a thread blocked in RecvFor gets the notice of a process that exits at once",
          "[integration][msg][notify][latency]") {
  CheckNotices(Ending::kExits, "notice of an exit to a blocked RecvFor");
}

}  // namespace
}  // namespace tocl::testing
