// Exit ordering (issue #18; Erlang's guarantee for monitors): the messages
// a process sent before it died reach a receiver before that receiver's
// exit notice for the process, or not at all, never after it.
//
// A victim (tocl-msg-worker --role source) sends its first message to a
// thread here that watches it (Notify), waits for the go, sends the rest
// and then exits (its Shutdown flushes every message) or kills itself with
// SIGKILL as soon as its last Send returned. Many rounds, over shm and over
// tcp, the victim's process or its sending thread watched. The receiving
// thread either receives all along, or is busy until the notice is in its
// mailbox (a callback watch made after the message watch fires after it):
// with the runtime's unexpected-message cap small, most of the victim's
// messages are then still in the shm rings or the socket, and must be
// delivered before the notice. In every round, no message of the victim
// may come after the notice; when it exits, none may be missing either.
#include <fmt/format.h>
#include <signal.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "daemon_harness.h"
#include "messaging_payload.h"
#include "messaging_support.h"
#include "status_assertions.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr Tag kDataTag = 1;
constexpr Tag kNoticeTag = 99;
constexpr uint64_t kMessages = 200;
// A few dozen of the victim's messages: the rest wait in the rings or the
// socket while the receiver is busy.
constexpr size_t kUnexpectedCap = size_t{16} << 10;
constexpr int kRounds = 24;
// After the notice, when some message is still missing: long enough for the
// slowest way a late one could come (a dead sender's shm channel is looked
// at by the once-a-second housekeeping).
constexpr auto kLateWindow = milliseconds(1500);

enum class Ending { kExits, kKilled };
enum class Receiver { kReceiving, kBusy };

struct Tally {
  int rounds = 0;
  uint64_t before = 0;  // victims' messages received before their notice
  uint64_t after = 0;   // ... after it: violations
  int rounds_violated = 0;
  uint64_t missing = 0;  // never arrived (only allowed after a SIGKILL)
  int rounds_missing = 0;

  std::string Summary() const {
    return fmt::format(
        "{} rounds: {} messages before the notice, {} after it in {} rounds (violations), {} never "
        "arrived in {} rounds",
        rounds, before, after, rounds_violated, missing, rounds_missing);
  }
};

// One victim, its process or its sending thread watched by `self`.
void OneRound(const Daemon& daemon, Runtime& runtime, Gid self, const std::string& network,
              Ending ending, Receiver receiver, bool watch_thread, int round, Tally& tally) {
  MsgWorkerArgs args("source", fmt::format("victim-{}", round));
  args.Subsystems(network).To({self}).WithTag(kDataTag).Count(kMessages).Size(64).PauseBefore(1);
  if (ending == Ending::kKilled) args.KillSelf();
  MsgWorker victim = REQUIRE_VALUE(MsgWorker::Start(daemon, args));
  INFO("round " << round << (receiver == Receiver::kBusy ? " (busy receiver" : " (receiving")
                << (watch_thread ? ", watching the thread)" : ", watching the process)")
                << ", victim:\n"
                << victim.Output());
  const Gid from = victim.threads().front();
  // A thread's notice comes from the directory just before its process's.
  const Gid watched = watch_thread ? from : victim.process();
  REQUIRE_OK(runtime.Notify(self, watched, kNoticeTag));
  // Shared: the callback may outlive a round that a REQUIRE ended.
  auto noticed = std::make_shared<std::atomic<bool>>(false);
  REQUIRE_OK(runtime.Notify(watched, [noticed](const ExitNotice&) { *noticed = true; }));

  // The route is up once its first message is here (left queued).
  REQUIRE(WaitUntil([&] { return runtime.TryProbe(self, from, kDataTag).ok(); }, seconds(15)));
  victim.child().CloseStdin();  // go
  if (receiver == Receiver::kBusy) REQUIRE(WaitUntil([&] { return noticed->load(); }, seconds(15)));

  uint64_t expected = 0;
  for (;;) {
    Buffer message = REQUIRE_VALUE(runtime.RecvFor(self, seconds(15), victim.process()));
    if (message.tag() == kNoticeTag && message.source() == watched) {
      CHECK(REQUIRE_VALUE(ParseExitNotice(message)).gid == watched);
      break;
    }
    REQUIRE(message.source() == from);
    REQUIRE(CheckPayload(message.span(), from, self) == "");
    REQUIRE(ReadPayloadHeader(message.span()).seq == expected);
    ++expected;
  }
  const uint64_t before = expected;
  // What did not come before the notice must not come after it either.
  uint64_t after = 0;
  while (expected < kMessages) {
    if (!runtime.RecvFor(self, kLateWindow, victim.process()).ok()) break;
    ++after;
    ++expected;
  }
  const int code = REQUIRE_VALUE(victim.child().Wait(seconds(30)));
  CHECK(code == (ending == Ending::kExits ? 0 : 128 + SIGKILL));

  ++tally.rounds;
  tally.before += before;
  tally.after += after;
  if (after > 0) ++tally.rounds_violated;
  if (expected < kMessages) {
    tally.missing += kMessages - expected;
    ++tally.rounds_missing;
  }
}

void ExitOrder(const std::string& network, Ending ending) {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  RuntimeOptions options = RuntimeOptionsFor(daemon, "receiver", network);
  options.unexpected_cap = kUnexpectedCap;
  auto runtime = REQUIRE_VALUE(StartRuntime(options));
  const Gid self = REQUIRE_VALUE(runtime->EnrollThread("receiver"));
  Tally tally;
  for (int round = 0; round < kRounds; ++round) {
    OneRound(daemon, *runtime, self, network, ending,
             round % 2 == 0 ? Receiver::kBusy : Receiver::kReceiving,
             /*watch_thread=*/round % 4 >= 2, round, tally);
  }
  fmt::print("exit order over {}, victims {}: {}\n", network,
             ending == Ending::kExits ? "exit" : "SIGKILL themselves", tally.Summary());
  INFO(tally.Summary());
  CHECK(tally.after == 0);
  // A victim that exits flushes every message first.
  if (ending == Ending::kExits) CHECK(tally.missing == 0);
}

TEST_CASE("what a process sent over shm before it exited comes before its exit notice",
          "[integration][msg][notify][shm]") {
  ExitOrder("shm", Ending::kExits);
}

TEST_CASE("what a process sent over shm before SIGKILL comes before its exit notice or never",
          "[integration][msg][notify][shm]") {
  ExitOrder("shm", Ending::kKilled);
}

TEST_CASE("what a process sent over tcp before it exited comes before its exit notice",
          "[integration][msg][notify][tcp]") {
  ExitOrder("tcp", Ending::kExits);
}

TEST_CASE("what a process sent over tcp before SIGKILL comes before its exit notice or never",
          "[integration][msg][notify][tcp]") {
  ExitOrder("tcp", Ending::kKilled);
}

}  // namespace
}  // namespace tocl::testing
