// Flow control: a receiver that does not call Recv for a while, with a
// small unexpected-message budget, while another process sends 20,000
// messages to it. The sender must be held back (its Sends block once its
// send queue is full), the receiver's memory must stay bounded, and when
// the receiver drains, every message arrives exactly once, in order.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <optional>
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

uint64_t RegisteredBytes(const Runtime& runtime) {
  uint64_t bytes = 0;
  for (const PoolClassStats& stats : runtime.PoolStats()) bytes += stats.bytes_registered;
  return bytes;
}

// Bytes of the classes' buffers that are neither free nor provided: what
// holds messages (unexpected ones included).
uint64_t HeldBytes(const Runtime& runtime) {
  uint64_t bytes = 0;
  for (const PoolClassStats& stats : runtime.PoolStats()) bytes += stats.in_use * stats.class_bytes;
  return bytes;
}

void BackPressure(const std::string& subsystems) {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  constexpr size_t kUnexpectedCap = 256 * 1024;
  constexpr uint64_t kCount = 20'000;
  constexpr size_t kSize = 1024;  // 20,000 of them: 20 MiB of payload, 40 MiB of 2 KiB buffers
  RuntimeOptions options = RuntimeOptionsFor(daemon, "slow-receiver", subsystems);
  options.unexpected_cap = kUnexpectedCap;
  auto runtime = REQUIRE_VALUE(StartRuntime(options));
  const Gid r = REQUIRE_VALUE(runtime->EnrollThread("r"));
  const uint64_t registered_before = RegisteredBytes(*runtime);
  const int64_t rss_before = REQUIRE_VALUE(ProcessRssKib(::getpid()));

  MsgWorker sender = REQUIRE_VALUE(MsgWorker::Start(daemon, MsgWorkerArgs("source", "fast-sender")
                                                                .Subsystems(subsystems)
                                                                .To({r})
                                                                .Count(kCount)
                                                                .Size(kSize)
                                                                .SendQueueDepth(256)));
  const Gid from = sender.threads().front();
  INFO("sender output:\n" << sender.Output());
  // Traffic flows, then stops: the sender cannot finish while r does not
  // receive. (Unthrottled it would be done in well under a second.)
  REQUIRE(sender.WaitForValue("progress", "sent", 100, seconds(30)));
  CHECK_FALSE(sender.WaitForLine("done", seconds(3)));
  const uint64_t sent_while_held = sender.LastValue("progress", "sent").value_or(0);
  CHECK(sent_while_held < kCount);

  const uint64_t registered = RegisteredBytes(*runtime);
  const uint64_t held = HeldBytes(*runtime);
  const int64_t rss = REQUIRE_VALUE(ProcessRssKib(::getpid()));
  INFO("while not receiving: sender sent "
       << sent_while_held << ", registered " << registered_before << " -> " << registered
       << " bytes, held " << held << " bytes, RSS " << rss_before << " -> " << rss << " KiB");
  // Holding everything sent would take 40 MiB; the budget is 256 KiB.
  CHECK(held <= 4 * kUnexpectedCap + (size_t{1} << 20));
  CHECK(registered <= registered_before + (size_t{8} << 20));
  if (!SanitizedBuild()) CHECK(rss - rss_before < 16 * 1024);

  // Now drain: everything, once, in order.
  for (uint64_t seq = 0; seq < kCount; ++seq) {
    auto message = runtime->RecvFor(r, seconds(30));
    if (!message.ok()) FAIL("message " << seq << ": " << message.status().ToString());
    REQUIRE(message->source() == from);
    const std::string problem = CheckPayload(message->span(), from, r);
    if (!problem.empty()) FAIL("message " << seq << ": " << problem);
    const uint64_t got = ReadPayloadHeader(message->span()).seq;
    if (got != seq) FAIL("message " << got << " arrived where " << seq << " was due");
  }
  Result<int> code = sender.child().Wait(seconds(60));
  REQUIRE_OK(code);
  CHECK(*code == 0);
  CHECK(sender.LastValue("done", "sent") == kCount);
  CHECK(runtime->RecvFor(r, milliseconds(200)).status().code() == StatusCode::kDeadlineExceeded);
  // The budget was used and given back.
  CHECK(HeldBytes(*runtime) <= held);
}

TEST_CASE("a sender to a receiver that does not receive is held back over shm, and nothing is lost",
          "[integration][msg][shm]") {
  BackPressure("shm");
}

TEST_CASE("a sender to a receiver that does not receive is held back over tcp, and nothing is lost",
          "[integration][msg][tcp]") {
  BackPressure("tcp");
}

TEST_CASE("a sender to a receiver that does not receive is held back over via, and nothing is lost",
          "[integration][msg][via]") {
  BackPressure("via");
}

// The application holds every message it receives until the pool is at its
// cap: the sender waits (nothing fails, nothing is dropped), and once the
// buffers go back, the rest arrives in order.
void HeldAtPoolCap(const std::string& subsystems) {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  RuntimeOptions options = RuntimeOptionsFor(daemon, "hoarder", subsystems);
  options.pool_cap = size_t{4} << 20;
  auto runtime = REQUIRE_VALUE(StartRuntime(options));
  const Gid r = REQUIRE_VALUE(runtime->EnrollThread("r"));
  constexpr uint64_t kCount = 400;  // 400 buffers of 32 KiB: three times the cap
  MsgWorker sender = REQUIRE_VALUE(MsgWorker::Start(daemon, MsgWorkerArgs("source", "generous")
                                                                .Subsystems(subsystems)
                                                                .To({r})
                                                                .Count(kCount)
                                                                .Size(30000)
                                                                .Linger()));
  const Gid from = sender.threads().front();
  uint64_t next = 0;
  auto take = [&](milliseconds timeout) -> std::optional<Buffer> {
    auto message = runtime->RecvFor(r, timeout);
    if (!message.ok()) {
      INFO("message " << next);
      CHECK(message.status().code() == StatusCode::kDeadlineExceeded);
      return std::nullopt;
    }
    CHECK(CheckPayload(message->span(), from, r).empty());
    CHECK(ReadPayloadHeader(message->span()).seq == next);
    ++next;
    return std::move(*message);
  };
  std::vector<Buffer> held;
  while (next < kCount) {
    std::optional<Buffer> message = take(milliseconds(1000));
    if (!message) break;
    held.push_back(std::move(*message));
  }
  INFO("held " << held.size() << " of " << kCount);
  REQUIRE_FALSE(held.empty());
  CHECK(held.size() < kCount);
  CHECK(held.size() * held.front().size_class() <= options.pool_cap);
  CHECK(sender.child().running());  // waiting, not failed

  held.clear();
  while (next < kCount) {
    std::optional<Buffer> message = take(seconds(15));
    if (!message) break;
  }
  INFO("sender:\n" << sender.Output());
  CHECK(next == kCount);
  Result<int> code = sender.Finish(seconds(60));
  REQUIRE_OK(code);
  CHECK(*code == 0);
}

TEST_CASE("a receiver holding its buffers up to the pool cap holds a shm sender back, then drains",
          "[integration][msg][shm][pool]") {
  HeldAtPoolCap("shm");
}

TEST_CASE("a receiver holding its buffers up to the pool cap holds a tcp sender back, then drains",
          "[integration][msg][tcp][pool]") {
  HeldAtPoolCap("tcp");
}

TEST_CASE("a receiver holding its buffers up to the pool cap holds a via sender back, then drains",
          "[integration][msg][via][pool]") {
  HeldAtPoolCap("via");
}

}  // namespace
}  // namespace tocl::testing
