// Messages between real processes (tocl-msg-worker) over shm and over tcp:
// ping-pong between threads of two processes, and 64 threads in each of two
// processes streaming to random threads of the other with checksums,
// exactly-once and per-pair order checked by the receivers.
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "daemon_harness.h"
#include "messaging_payload.h"
#include "messaging_support.h"
#include "status_assertions.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::vector<std::string> Subsystems(DirectoryClient& client, Gid process) {
  std::vector<std::string> names;
  auto entity = client.Lookup(process);
  if (entity.ok()) {
    for (const Endpoint& endpoint : entity->endpoints) names.push_back(endpoint.subsystem);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Two pinging threads in one process, two echoing threads in another: every
// reply must come back byte for byte from the thread it was sent to.
void PingPong(const std::string& subsystems) {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  const uint64_t count = MessageCount(4000, 1000);
  MsgWorker echo = REQUIRE_VALUE(
      MsgWorker::Start(daemon, MsgWorkerArgs("echo", "pong").Subsystems(subsystems).Threads(2)));
  MsgWorker ping = REQUIRE_VALUE(MsgWorker::Start(daemon, MsgWorkerArgs("ping", "ping")
                                                              .Subsystems(subsystems)
                                                              .Threads(2)
                                                              .Peer("pong", 2)
                                                              .Count(count)
                                                              .Size(4000)
                                                              .RandomSize()));
  // Each process published the network it opened, and only that one.
  auto client = REQUIRE_VALUE(daemon.Connect());
  CHECK(WaitUntil([&] { return Subsystems(*client, ping.process()).size() == 1; }, seconds(10)));
  CHECK(Subsystems(*client, ping.process()) == std::vector<std::string>{subsystems});
  CHECK(Subsystems(*client, echo.process()) == std::vector<std::string>{subsystems});
  if (subsystems != "shm") CHECK(ShmSegmentsOf(ping.pid()).empty());

  Result<int> code = ping.child().Wait(seconds(120));
  INFO("ping output:\n" << ping.Output() << "\necho output:\n" << echo.Output());
  REQUIRE_OK(code);
  CHECK(*code == 0);
  CHECK(ping.LastValue("done", "errors") == 0u);
  CHECK(ping.LastValue("done", "received") == count);
  Result<int> echo_code = echo.Finish(seconds(30));
  REQUIRE_OK(echo_code);
  CHECK(*echo_code == 0);
  CHECK(echo.LastValue("done", "received") == count);
  CHECK(echo.LastValue("done", "send_failures") == 0u);
  WARN("ping-pong over " << subsystems << ": " << count << " round trips, "
                         << ping.LastValue("done", "rtt_avg_us").value_or(0)
                         << " us average round trip");
  // Both exited normally: none of their shm segments is left.
  CHECK(WaitUntil(
      [&] { return ShmSegmentsOf(ping.pid()).empty() && ShmSegmentsOf(echo.pid()).empty(); },
      seconds(10)));
}

TEST_CASE("threads of two processes ping-pong over shm", "[integration][msg][shm]") {
  PingPong("shm");
}

TEST_CASE("threads of two processes ping-pong over tcp", "[integration][msg][tcp]") {
  PingPong("tcp");
}

TEST_CASE("threads of two processes ping-pong over via", "[integration][msg][via]") {
  PingPong("via");
}

// 64 threads on each side send `total / 2` messages each way to random
// threads of the other process, then an end marker to every thread there.
void Stream(const std::string& subsystems, uint64_t total, uint32_t threads) {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto args = [&](std::string name, std::string peer) {
    return MsgWorkerArgs("stream", std::move(name))
        .Subsystems(subsystems)
        .Threads(threads)
        .Peer(std::move(peer), threads)
        .Count(total / 2)
        .Size(512)
        .RandomSize()
        .Linger();
  };
  MsgWorker a = REQUIRE_VALUE(MsgWorker::Start(daemon, args("stream-a", "stream-b")));
  MsgWorker b = REQUIRE_VALUE(MsgWorker::Start(daemon, args("stream-b", "stream-a")));
  const auto start = std::chrono::steady_clock::now();
  const bool done = a.WaitForLine("done", seconds(170)) && b.WaitForLine("done", seconds(170));
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO("a:\n" << a.Output() << "\nb:\n" << b.Output());
  REQUIRE(done);
  for (MsgWorker* worker : {&a, &b}) {
    CHECK(worker->LastValue("done", "errors") == 0u);
    CHECK(worker->LastValue("done", "sent") == total / 2);
    CHECK(worker->LastValue("done", "received") == total / 2);
  }
  WARN(total << " messages between " << threads << " + " << threads << " threads over "
             << subsystems << " in " << elapsed << " s (" << total / elapsed << " msg/s)");
  Result<int> a_code = a.Finish(seconds(30));
  Result<int> b_code = b.Finish(seconds(30));
  CHECK(a_code.value_or(-1) == 0);
  CHECK(b_code.value_or(-1) == 0);
}

TEST_CASE(
    "64 threads in each of two processes stream to random peer threads over shm, exactly once",
    "[integration][msg][shm]") {
  Stream("shm", MessageCount(1'000'000, 100'000), 64);
}

TEST_CASE(
    "64 threads in each of two processes stream to random peer threads over tcp, exactly once",
    "[integration][msg][tcp]") {
  Stream("tcp", MessageCount(200'000, 40'000), 64);
}

TEST_CASE(
    "64 threads in each of two processes stream to random peer threads over via, exactly once",
    "[integration][msg][via]") {
  Stream("via", MessageCount(200'000, 40'000), 64);
}

// Four threads on each side stream messages of random sizes up to the
// short maximum: frames bigger than a tcp read, shm buffers of every class.
void LargeMessages(const std::string& subsystems) {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  const uint64_t total = MessageCount(6000, 1200);
  const size_t largest = 64 * 1024 - 64;  // the default short maximum minus the wire header
  auto args = [&](std::string name, std::string peer) {
    return MsgWorkerArgs("stream", std::move(name))
        .Subsystems(subsystems)
        .Threads(4)
        .Peer(std::move(peer), 4)
        .Count(total / 2)
        .Size(largest)
        .RandomSize()
        .Linger();
  };
  MsgWorker a = REQUIRE_VALUE(MsgWorker::Start(daemon, args("large-a", "large-b")));
  MsgWorker b = REQUIRE_VALUE(MsgWorker::Start(daemon, args("large-b", "large-a")));
  const bool done = a.WaitForLine("done", seconds(120)) && b.WaitForLine("done", seconds(120));
  INFO("a:\n" << a.Output() << "\nb:\n" << b.Output());
  REQUIRE(done);
  for (MsgWorker* worker : {&a, &b}) {
    CHECK(worker->LastValue("done", "errors") == 0u);
    CHECK(worker->LastValue("done", "received") == total / 2);
  }
  CHECK(a.Finish(seconds(30)).value_or(-1) == 0);
  CHECK(b.Finish(seconds(30)).value_or(-1) == 0);
}

TEST_CASE("messages of every size up to the short maximum arrive intact over shm",
          "[integration][msg][shm]") {
  LargeMessages("shm");
}

TEST_CASE("messages of every size up to the short maximum arrive intact over tcp",
          "[integration][msg][tcp]") {
  LargeMessages("tcp");
}

TEST_CASE("messages of every size up to the short maximum arrive intact over via",
          "[integration][msg][via]") {
  LargeMessages("via");
}

// A process sends and exits at once (Shutdown flushes): everything it sent
// arrives, in order, after it is gone.
void SentBeforeExit(const std::string& subsystems) {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto runtime = REQUIRE_VALUE(StartRuntime(daemon, "receiver", subsystems));
  const Gid r = REQUIRE_VALUE(runtime->EnrollThread("r"));
  constexpr uint64_t kCount = 5000;
  MsgWorker sender = REQUIRE_VALUE(MsgWorker::Start(
      daemon,
      MsgWorkerArgs("source", "leaver").Subsystems(subsystems).To({r}).Count(kCount).Size(1000)));
  const Gid from = sender.threads().front();
  // The sender is not waited for: it exits while messages are in flight.
  for (uint64_t seq = 0; seq < kCount; ++seq) {
    auto message = runtime->RecvFor(r, seconds(30));
    if (!message.ok()) {
      FAIL("message " << seq << " of " << kCount << ": " << message.status().ToString()
                      << "\nsender:\n"
                      << sender.Output());
    }
    const std::string problem = CheckPayload(message->span(), from, r);
    if (!problem.empty()) FAIL("message " << seq << ": " << problem);
    const uint64_t got = ReadPayloadHeader(message->span()).seq;
    if (got != seq) FAIL("message " << got << " arrived where " << seq << " was due");
  }
  Result<int> code = sender.child().Wait(seconds(30));
  INFO("sender:\n" << sender.Output());
  REQUIRE_OK(code);
  CHECK(*code == 0);
  CHECK(runtime->RecvFor(r, milliseconds(200)).status().code() == StatusCode::kDeadlineExceeded);
}

TEST_CASE("messages sent just before a process exits all arrive over shm",
          "[integration][msg][shm]") {
  SentBeforeExit("shm");
}

TEST_CASE("messages sent just before a process exits all arrive over tcp",
          "[integration][msg][tcp]") {
  SentBeforeExit("tcp");
}

TEST_CASE("messages sent just before a process exits all arrive over via",
          "[integration][msg][via]") {
  SentBeforeExit("via");
}

// A shm segment has room for 64 sending processes (its channels). More
// senders than that at once must still get through (over tcp, when shm has
// no channel left); senders that come and go give their channels back.
TEST_CASE("more sending processes than a shm segment has channels all get through",
          "[integration][msg][shm]") {
  if (SanitizedBuild()) {
    // 70 sanitized processes take minutes and gigabytes; the plain builds
    // run this.
    WARN("skipped under sanitizers");
    return;
  }
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto runtime = REQUIRE_VALUE(StartRuntime(daemon, "popular", "shm,tcp"));
  const Gid r = REQUIRE_VALUE(runtime->EnrollThread("r"));
  constexpr int kSenders = 70;
  constexpr uint64_t kEach = 20;

  auto receive_all = [&](int senders, std::map<Gid, uint64_t>& next) {
    for (uint64_t n = 0; n < senders * kEach; ++n) {
      auto message = runtime->RecvFor(r, seconds(30));
      if (!message.ok()) FAIL("message " << n << ": " << message.status().ToString());
      const std::string problem = CheckPayload(message->span(), message->source(), r);
      if (!problem.empty()) FAIL(problem);
      uint64_t& expected = next[message->source()];
      const uint64_t seq = ReadPayloadHeader(message->span()).seq;
      if (seq != expected)
        FAIL("from " << message->source().ToString() << ": " << seq << " where " << expected
                     << " was due");
      ++expected;
    }
  };

  SECTION("at once") {
    std::vector<MsgWorker> senders;
    for (int i = 0; i < kSenders; ++i) {
      senders.push_back(REQUIRE_VALUE(MsgWorker::Start(
          daemon,
          MsgWorkerArgs("source", "crowd-" + std::to_string(i)).To({r}).Count(kEach).Linger())));
    }
    std::map<Gid, uint64_t> next;
    receive_all(kSenders, next);
    CHECK(next.size() == kSenders);
    for (MsgWorker& sender : senders) {
      INFO(sender.Output());
      CHECK(sender.Finish(seconds(30)).value_or(-1) == 0);
    }
  }
  SECTION("one after another, over shm only") {
    auto shm_only = REQUIRE_VALUE(StartRuntime(daemon, "popular-shm", "shm"));
    const Gid s = REQUIRE_VALUE(shm_only->EnrollThread("s"));
    std::map<Gid, uint64_t> next;
    for (int i = 0; i < kSenders; ++i) {
      MsgWorker sender = REQUIRE_VALUE(
          MsgWorker::Start(daemon, MsgWorkerArgs("source", "passer-" + std::to_string(i))
                                       .Subsystems("shm")
                                       .To({s})
                                       .Count(kEach)));
      for (uint64_t n = 0; n < kEach; ++n) {
        auto message = shm_only->RecvFor(s, seconds(30));
        INFO("sender " << i << ":\n" << sender.Output());
        REQUIRE_OK(message);
        CHECK(ReadPayloadHeader(message->span()).seq == next[message->source()]++);
      }
      INFO(sender.Output());
      CHECK(sender.child().Wait(seconds(30)).value_or(-1) == 0);
    }
    CHECK(next.size() == kSenders);
  }
}

}  // namespace
}  // namespace tocl::testing
