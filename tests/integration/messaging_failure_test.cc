// Processes and daemons that die: a receive from a process killed with
// SIGKILL ends (timeout or error) while receives from a live one go on;
// sends to a process killed mid-traffic end in an error, and its shm
// segments are removed; traffic between two processes goes on while their
// daemon is killed and restarted.
#include <signal.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <regex>
#include <string>
#include <thread>

#include "daemon_harness.h"
#include "messaging_payload.h"
#include "messaging_support.h"
#include "status_assertions.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

std::string Join(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += name + " ";
  return text;
}

TEST_CASE("a receive from a process killed with SIGKILL ends, receives from a live one go on",
          "[integration][msg][shm]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto runtime = REQUIRE_VALUE(StartRuntime(daemon, "survivor"));
  const Gid x = REQUIRE_VALUE(runtime->EnrollThread("x"));
  const Gid y = REQUIRE_VALUE(runtime->EnrollThread("y"));

  // The doomed process sends x one message, then waits to be killed.
  MsgWorker doomed = REQUIRE_VALUE(
      MsgWorker::Start(daemon, MsgWorkerArgs("source", "doomed").To({x}).Count(1).Linger()));
  MsgWorker alive =
      REQUIRE_VALUE(MsgWorker::Start(daemon, MsgWorkerArgs("source", "alive").To({y}).Count(0)));
  const Gid from = alive.threads().front();
  const Gid doomed_thread = doomed.threads().front();
  REQUIRE_OK(runtime->RecvFor(x, seconds(30), doomed_thread));

  // y receives from the live source throughout, checking order.
  std::atomic<uint64_t> y_received{0};
  std::string y_error;
  // A jthread asks itself to stop when it goes out of scope, even when a
  // REQUIRE below ends the test early.
  std::jthread receiver_y([&](std::stop_token stop) {
    uint64_t expected = 0;
    while (!stop.stop_requested()) {
      auto message = runtime->RecvFor(y, milliseconds(100), from);
      if (!message.ok()) {
        if (message.status().code() == StatusCode::kDeadlineExceeded) continue;
        y_error = message.status().ToString();
        return;
      }
      const auto header = ReadPayloadHeader(message->span());
      std::string problem = CheckPayload(message->span(), from, y);
      if (problem.empty() && header.seq != expected) {
        problem = "message " + std::to_string(header.seq) + " where " + std::to_string(expected) +
                  " was due";
      }
      if (!problem.empty()) {
        y_error = problem;
        return;
      }
      ++expected;
      ++y_received;
    }
  });
  REQUIRE(WaitUntil([&] { return y_received > 100; }, seconds(30)));

  // x waits for the doomed process, which is killed meanwhile.
  const auto timeout = seconds(4);
  std::atomic<bool> x_waiting{false};
  Result<Buffer> x_result = Internal("not returned");
  steady_clock::duration x_waited{};
  std::jthread receiver_x([&] {
    x_waiting = true;
    const auto start = steady_clock::now();
    x_result = runtime->RecvFor(x, timeout, doomed_thread);
    x_waited = steady_clock::now() - start;
  });
  REQUIRE(WaitUntil([&] { return x_waiting.load(); }, seconds(5)));
  REQUIRE(doomed.child().Kill().value_or(-1) == 128 + SIGKILL);
  const uint64_t y_at_kill = y_received;

  receiver_x.join();
  INFO("RecvFor from the killed process -> " << x_result.status().ToString() << " after "
                                             << std::chrono::duration<double>(x_waited).count()
                                             << " s");
  CHECK_FALSE(x_result.ok());
  CHECK(x_waited < timeout + seconds(10));
  // Again, now that it is dead: the same, not a hang.
  auto again = runtime->RecvFor(x, seconds(1), doomed_thread);
  CHECK_FALSE(again.ok());

  // y went on receiving from the live process all along.
  CHECK(WaitUntil([&] { return y_received > y_at_kill + 100; }, seconds(30)));
  receiver_y.request_stop();
  receiver_y.join();
  INFO("y: " << y_error);
  CHECK(y_error.empty());
  Result<int> code = alive.Finish(seconds(30));
  INFO("alive:\n" << alive.Output());
  CHECK(code.value_or(-1) == 0);
}

// A source streams to a sink; the sink is killed with SIGKILL. The source's
// sends must end in an error (or a buffer ending kFailed) instead of
// hanging, and the sink's shm segments must go away.
void KilledMidTraffic(const std::string& subsystems) {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  MsgWorker victim = REQUIRE_VALUE(
      MsgWorker::Start(daemon, MsgWorkerArgs("sink", "victim").Subsystems(subsystems).Threads(2)));
  MsgWorker source = REQUIRE_VALUE(MsgWorker::Start(daemon, MsgWorkerArgs("source", "source")
                                                                .Subsystems(subsystems)
                                                                .To(victim.threads())
                                                                .Count(0)
                                                                .Size(2000)
                                                                .Track()));
  INFO("source:\n" << source.Output() << "\nvictim:\n" << victim.Output());
  REQUIRE(victim.WaitForValue("progress", "received", 2000, seconds(60)));
  const std::vector<std::string> segments = ShmSegmentsOf(victim.pid());
  if (subsystems == "shm") {
    INFO("tocl segments now: " << Join(ShmSegments()));
    CHECK_FALSE(segments.empty());
  } else {
    CHECK(segments.empty());
  }
  const pid_t victim_pid = victim.pid();
  REQUIRE(victim.child().Kill().value_or(-1) == 128 + SIGKILL);

  // The source gives up with an error: exit code 3 and a "failed" line.
  Result<int> code = source.child().Wait(seconds(90));
  REQUIRE_OK(code);
  CHECK(*code == 3);
  const std::string failed = source.Line("failed").value_or("(none)");
  INFO("failed " << failed);
  CHECK(std::regex_search(
      failed, std::regex("code=(not_found|failed_precondition|unavailable)|state=failed")));

  // "The daemon or the next start removes stale segments."
  if (!segments.empty()) {
    bool gone = WaitUntil([&] { return ShmSegmentsOf(victim_pid).empty(); }, seconds(2));
    if (!gone) {
      auto next = REQUIRE_VALUE(StartRuntime(daemon, "next", subsystems));
      gone = WaitUntil([&] { return ShmSegmentsOf(victim_pid).empty(); }, seconds(20));
    }
    INFO("left: " << Join(ShmSegmentsOf(victim_pid)));
    CHECK(gone);
  }
  // The daemon has the victim down as exited.
  auto client = REQUIRE_VALUE(daemon.Connect());
  CHECK(WaitUntil(
      [&] {
        auto entity = client->Lookup(victim.process());
        return entity.ok() && entity->state == EntityState::kExited;
      },
      seconds(10)));
}

TEST_CASE("a process killed mid-traffic over shm: the sender's sends fail, its segments go",
          "[integration][msg][shm]") {
  KilledMidTraffic("shm");
}

TEST_CASE("a process killed mid-traffic over tcp: the sender's sends fail",
          "[integration][msg][tcp]") {
  KilledMidTraffic("tcp");
}

// A receiver that never receives holds its sender back until the sender
// blocks in Send; then the receiver is killed. The blocked Send (or the
// buffers behind it) must fail instead of waiting for ever.
void BlockedSenderLosesItsReceiver(const std::string& subsystems) {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  MsgWorker victim = REQUIRE_VALUE(MsgWorker::Start(
      daemon, MsgWorkerArgs("idle", "deaf").Subsystems(subsystems).UnexpectedCap(64 * 1024)));
  MsgWorker source = REQUIRE_VALUE(MsgWorker::Start(daemon, MsgWorkerArgs("source", "insistent")
                                                                .Subsystems(subsystems)
                                                                .To(victim.threads())
                                                                .Count(0)
                                                                .Size(1000)
                                                                .SendQueueDepth(64)
                                                                .Track()));
  // The sender stalls: its progress stops moving for half a second.
  uint64_t last = 0;
  auto quiet_since = steady_clock::now();
  const bool stalled = WaitUntil(
      [&] {
        const uint64_t sent = source.LastValue("progress", "sent").value_or(0);
        if (sent != last || sent == 0) {
          last = sent;
          quiet_since = steady_clock::now();
        }
        return steady_clock::now() - quiet_since > milliseconds(500);
      },
      seconds(60), milliseconds(50));
  INFO("source:\n" << source.Output());
  REQUIRE(stalled);
  REQUIRE_FALSE(source.Line("failed").has_value());
  REQUIRE(victim.child().Kill().value_or(-1) == 128 + SIGKILL);

  Result<int> code = source.child().Wait(seconds(90));
  INFO("source after the kill:\n" << source.Output());
  REQUIRE_OK(code);
  CHECK(*code == 3);
  const std::string failed = source.Line("failed").value_or("(none)");
  CHECK(std::regex_search(
      failed, std::regex("code=(not_found|failed_precondition|unavailable)|state=failed")));
}

TEST_CASE("a sender blocked by a receiver that never receives fails when it is killed, over shm",
          "[integration][msg][shm]") {
  BlockedSenderLosesItsReceiver("shm");
}

TEST_CASE("a sender blocked by a receiver that never receives fails when it is killed, over tcp",
          "[integration][msg][tcp]") {
  BlockedSenderLosesItsReceiver("tcp");
}

// Two stream workers exchange messages for several seconds; the daemon is
// killed with SIGKILL in the middle and restarted a little later.
void DaemonKilled(const std::string& subsystems) {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  const uint64_t each_way = MessageCount(40'000, 8'000);
  auto args = [&](std::string name, std::string peer) {
    return MsgWorkerArgs("stream", std::move(name))
        .Subsystems(subsystems)
        .Threads(8)
        .Peer(std::move(peer), 8)
        .Count(each_way)
        .Size(256)
        .RandomSize()
        .DurationMs(6000)
        .Linger();
  };
  MsgWorker a = REQUIRE_VALUE(MsgWorker::Start(daemon, args("flow-a", "flow-b")));
  MsgWorker b = REQUIRE_VALUE(MsgWorker::Start(daemon, args("flow-b", "flow-a")));
  INFO("a:\n" << a.Output() << "\nb:\n" << b.Output());
  REQUIRE(a.WaitForValue("progress", "received", each_way / 10, seconds(60)));
  REQUIRE(b.WaitForValue("progress", "received", each_way / 10, seconds(60)));

  REQUIRE_OK(daemon.Kill());
  const uint64_t a_at_kill = a.LastValue("progress", "received").value_or(0);
  const uint64_t b_at_kill = b.LastValue("progress", "received").value_or(0);
  // Messages keep flowing with no daemon at all.
  const bool flowed =
      a.WaitForValue("progress", "received", a_at_kill + each_way / 20, seconds(20)) &&
      b.WaitForValue("progress", "received", b_at_kill + each_way / 20, seconds(20));
  const bool finished_early = a.Line("done").has_value() && b.Line("done").has_value();
  CHECK((flowed || finished_early));
  REQUIRE_OK(daemon.Restart());

  REQUIRE(a.WaitForLine("done", seconds(120)));
  REQUIRE(b.WaitForLine("done", seconds(120)));
  for (MsgWorker* worker : {&a, &b}) {
    CHECK(worker->LastValue("done", "errors") == 0u);
    CHECK(worker->LastValue("done", "sent") == each_way);
    CHECK(worker->LastValue("done", "received") == each_way);
  }
  CHECK(a.Finish(seconds(30)).value_or(-1) == 0);
  CHECK(b.Finish(seconds(30)).value_or(-1) == 0);
}

TEST_CASE("traffic over shm goes on while the daemon is killed and restarted",
          "[integration][msg][shm]") {
  DaemonKilled("shm");
}

TEST_CASE("traffic over tcp goes on while the daemon is killed and restarted",
          "[integration][msg][tcp]") {
  DaemonKilled("tcp");
}

// After a daemon restart, processes that were running re-enroll with their
// gids; one that starts afterwards finds them in the directory and talks
// to them.
void NewcomerAfterRestart(const std::string& subsystems) {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  MsgWorker echo = REQUIRE_VALUE(
      MsgWorker::Start(daemon, MsgWorkerArgs("echo", "veteran").Subsystems(subsystems)));
  const Gid target = echo.threads().front();
  REQUIRE_OK(daemon.Kill());
  REQUIRE_OK(daemon.Restart());
  auto client = REQUIRE_VALUE(daemon.Connect());
  INFO("echo:\n" << echo.Output());
  // Re-enrolled: running again, with its endpoints.
  REQUIRE(WaitUntil(
      [&] {
        auto entity = client->Lookup(echo.process());
        return entity.ok() && entity->state == EntityState::kRunning && !entity->endpoints.empty();
      },
      seconds(30)));
  auto runtime = REQUIRE_VALUE(StartRuntime(daemon, "newcomer", subsystems));
  const Gid me = REQUIRE_VALUE(runtime->EnrollThread("me"));
  for (int i = 0; i < 10; ++i) {
    const std::string text = "hello " + std::to_string(i);
    REQUIRE_OK(runtime->Send(me, target, 1, Bytes(text)));
    Buffer reply = REQUIRE_VALUE(runtime->RecvFor(me, seconds(15), target, 1));
    CHECK(Text(reply) == text);
  }
  CHECK(echo.Finish(seconds(30)).value_or(-1) == 0);
}

TEST_CASE("a process started after a daemon restart talks to one from before it, over shm",
          "[integration][msg][shm]") {
  NewcomerAfterRestart("shm");
}

TEST_CASE("a process started after a daemon restart talks to one from before it, over tcp",
          "[integration][msg][tcp]") {
  NewcomerAfterRestart("tcp");
}

TEST_CASE(
    "a first send while the daemon stays down fails with Unavailable after the connect timeout",
    "[integration][msg]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  RuntimeOptions options = RuntimeOptionsFor(daemon, "a");
  options.connect_timeout = milliseconds(2000);
  auto a = REQUIRE_VALUE(StartRuntime(options));
  auto b = REQUIRE_VALUE(StartRuntime(daemon, "b"));
  const Gid a1 = REQUIRE_VALUE(a->EnrollThread("a1"));
  const Gid b1 = REQUIRE_VALUE(b->EnrollThread("b1"));
  const Gid b2 = REQUIRE_VALUE(b->EnrollThread("b2"));
  // a knows b1 (and b's process) before the daemon goes.
  REQUIRE_OK(a->Send(a1, b1, 1, Bytes("before")));
  REQUIRE_OK(b->RecvFor(b1, seconds(10)));
  auto client = REQUIRE_VALUE(daemon.Connect());
  REQUIRE(WaitUntil([&] { return client->Lookup(b2).ok(); }, seconds(10)));
  REQUIRE_OK(daemon.Kill());

  // An established destination does not need the daemon.
  REQUIRE_OK(a->Send(a1, b1, 1, Bytes("during")));
  CHECK(Text(REQUIRE_VALUE(b->RecvFor(b1, seconds(10)))) == "during");
  // A new one needs its lookup: the daemon is waited for up to the connect
  // timeout (a restart would come back within it), then the send says why.
  const auto start = steady_clock::now();
  Status first = a->Send(a1, b2, 1, Bytes("new"));
  const auto took = steady_clock::now() - start;
  INFO("first send to " << b2.ToString() << " with no daemon -> " << first.ToString() << " after "
                        << std::chrono::duration_cast<milliseconds>(took).count() << " ms");
  CHECK(took >= milliseconds(1000));
  CHECK(took < seconds(20));
  CHECK(first.code() == StatusCode::kUnavailable);
  CHECK(first.message().find("did not answer within connect_timeout (2000 ms)") !=
        std::string::npos);
  // Back with its daemon, the new destination works.
  REQUIRE_OK(daemon.Restart());
  Status after = Internal("not tried");
  CHECK(WaitUntil(
      [&] {
        after = a->Send(a1, b2, 1, Bytes("after"));
        return after.ok();
      },
      seconds(30), milliseconds(200)));
  INFO("after the restart: " << after.ToString());
  bool got_after = false;
  while (auto message = b->RecvFor(b2, seconds(10))) {
    if (Text(*message) == "after") {
      got_after = true;
      break;
    }
  }
  CHECK(got_after);
}

TEST_CASE("a first send whose lookup meets a daemon restart waits for the daemon and goes through",
          "[integration][msg]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  RuntimeOptions options = RuntimeOptionsFor(daemon, "a");
  options.connect_timeout = seconds(20);
  auto a = REQUIRE_VALUE(StartRuntime(options));
  auto b = REQUIRE_VALUE(StartRuntime(daemon, "b"));
  const Gid a1 = REQUIRE_VALUE(a->EnrollThread("a1"));
  const Gid b1 = REQUIRE_VALUE(b->EnrollThread("b1"));
  auto client = REQUIRE_VALUE(daemon.Connect());
  REQUIRE(WaitUntil([&] { return client->Lookup(b1).ok(); }, seconds(10)));
  client.reset();
  REQUIRE_OK(daemon.Kill());

  // The first send to b1 looks it up while there is no daemon (the soak met
  // it mid-lookup: "Socket closed"); the daemon comes back while it waits.
  std::atomic<bool> sending{false};
  Status first = Internal("not sent");
  std::jthread sender([&] {
    sending = true;
    first = a->Send(a1, b1, 1, Bytes("first"));
  });
  REQUIRE(WaitUntil([&] { return sending.load(); }, seconds(10)));
  REQUIRE_OK(daemon.Restart());
  sender.join();
  INFO("first send to " << b1.ToString() << " across the restart -> " << first.ToString());
  CHECK(first.ok());
  CHECK(Text(REQUIRE_VALUE(b->RecvFor(b1, seconds(10)))) == "first");
}

}  // namespace
}  // namespace tocl::testing
