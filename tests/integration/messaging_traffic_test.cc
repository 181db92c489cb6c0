// Messages between real processes (tocl-msg-worker) over shm and over tcp:
// ping-pong between threads of two processes, and 64 threads in each of two
// processes streaming to random threads of the other with checksums,
// exactly-once and per-pair order checked by the receivers.
#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "daemon_harness.h"
#include "messaging_support.h"
#include "status_assertions.h"

namespace tocl::testing {
namespace {

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
  if (subsystems == "tcp") CHECK(ShmSegmentsOf(ping.pid()).empty());

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

}  // namespace
}  // namespace tocl::testing
