// Long messages on one host (issue #4): larger than the short maximum, cut
// into fragments, over shm and over two tcp networks on loopback at once,
// received whole (Recv) or into the caller's memory (RecvInto), in order
// with the short messages of the same thread pair, within the receiver's
// reassembly memory. The multi-host cases (two veth networks, links going
// down) are in tests/netns.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <future>
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

struct Pair {
  std::unique_ptr<Runtime> sender, receiver;
  Gid s, r;
};

// `sender_partial_timeout`: the sender's (the receiver keeps the default).
Pair StartPair(const Daemon& daemon, const std::string& networks,
               size_t reassembly_cap = size_t{1} << 30,
               milliseconds sender_partial_timeout = RuntimeOptions().partial_timeout) {
  Pair pair;
  RuntimeOptions options = RuntimeOptionsFor(daemon, "long-sender");
  options.networks = networks;
  options.partial_timeout = sender_partial_timeout;
  options.fragment_timeout = std::min(options.fragment_timeout, sender_partial_timeout / 4);
  pair.sender = REQUIRE_VALUE(StartRuntime(options));
  options.partial_timeout = RuntimeOptions().partial_timeout;
  options.fragment_timeout = RuntimeOptions().fragment_timeout;
  options.name = "long-receiver";
  options.reassembly_cap = reassembly_cap;
  pair.receiver = REQUIRE_VALUE(StartRuntime(options));
  pair.s = REQUIRE_VALUE(pair.sender->EnrollThread("s"));
  pair.r = REQUIRE_VALUE(pair.receiver->EnrollThread("r"));
  return pair;
}

const NetworkPeerStats* PeerStats(const std::vector<NetworkStats>& networks,
                                  const std::string& name, Gid peer) {
  for (const NetworkStats& network : networks) {
    if (network.name != name) continue;
    for (const NetworkPeerStats& stats : network.peers) {
      if (stats.peer == peer) return &stats;
    }
  }
  return nullptr;
}

TEST_CASE("a long message over shm arrives whole, by Recv and by RecvInto", "[long]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  Pair p = StartPair(daemon, "shm");
  const auto payload = PatternBytes(8 << 20, 1);

  REQUIRE_OK(p.sender->Send(p.s, p.r, 5, std::span<const std::byte>(payload)));
  Buffer whole = REQUIRE_VALUE(p.receiver->RecvFor(p.r, seconds(30)));
  CHECK(whole.size() == payload.size());
  CHECK(whole.capacity() == payload.size());
  CHECK(whole.tag() == 5);
  CHECK(whole.source() == p.s);
  CHECK(std::memcmp(whole.data(), payload.data(), payload.size()) == 0);

  // RecvInto posted first: the fragments land in our memory.
  std::vector<std::byte> into(payload.size() + 100);
  auto received = std::async(
      std::launch::async, [&] { return p.receiver->RecvIntoFor(p.r, into, seconds(30), p.s, 6); });
  REQUIRE_OK(p.sender->Send(p.s, p.r, 6, std::span<const std::byte>(payload)));
  MessageInfo info = REQUIRE_VALUE(received.get());
  CHECK(info.size == payload.size());
  CHECK(info.tag == 6);
  CHECK(info.source == p.s);
  CHECK(std::memcmp(into.data(), payload.data(), payload.size()) == 0);
}

TEST_CASE("a long message uses both tcp networks", "[long]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  Pair p = StartPair(daemon, "tcp:127.0.0.1,tcp:127.0.0.2");
  const auto payload = PatternBytes(32 << 20, 2);
  std::vector<std::byte> into(payload.size());
  auto received = std::async(std::launch::async,
                             [&] { return p.receiver->RecvIntoFor(p.r, into, seconds(60)); });
  REQUIRE_OK(p.sender->Send(p.s, p.r, 1, std::span<const std::byte>(payload)));
  MessageInfo info = REQUIRE_VALUE(received.get());
  CHECK(info.size == payload.size());
  CHECK(into == payload);

  auto networks = p.sender->Networks();
  REQUIRE(networks.size() == 2);
  CHECK(networks[0].name == "tcp");
  CHECK(networks[1].name == "tcp-1");
  CHECK(networks[0].address.ends_with("/8"));
  const NetworkPeerStats* first = PeerStats(networks, "tcp", p.receiver->gid());
  const NetworkPeerStats* second = PeerStats(networks, "tcp-1", p.receiver->gid());
  REQUIRE(first != nullptr);
  REQUIRE(second != nullptr);
  INFO("fragments: tcp " << first->fragments_sent << ", tcp-1 " << second->fragments_sent);
  CHECK(first->fragments_sent > 0);
  CHECK(second->fragments_sent > 0);
  CHECK(first->fragments_sent + second->fragments_sent >= payload.size() / (64 << 10));
  CHECK(first->fragments_resent + second->fragments_resent == 0);
  CHECK(networks[0].bytes_sent + networks[1].bytes_sent > payload.size());
  const auto received_stats = p.receiver->Networks();
  CHECK(received_stats[0].frames_received > 0);
  CHECK(received_stats[1].frames_received > 0);
}

TEST_CASE("long and short messages of one pair keep their order", "[long]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  for (const char* networks : {"shm", "tcp:127.0.0.1,tcp:127.0.0.2"}) {
    SECTION(networks) {
      Pair p = StartPair(daemon, networks);
      constexpr int kMessages = 24;
      auto sent = std::async(std::launch::async, [&] {
        for (int i = 0; i < kMessages; ++i) {
          const size_t size = i % 3 == 1 ? (size_t{1} << 20) + 17 * i : 100 + i;
          const auto payload = PatternBytes(size, 100 + i);
          Status status = p.sender->Send(p.s, p.r, 1000 + i, std::span<const std::byte>(payload));
          if (!status.ok()) return status;
        }
        return Status::Ok();
      });
      for (int i = 0; i < kMessages; ++i) {
        Buffer message = REQUIRE_VALUE(p.receiver->RecvFor(p.r, seconds(30)));
        CHECK(message.tag() == Tag(1000 + i));
        const size_t size = i % 3 == 1 ? (size_t{1} << 20) + 17 * i : 100 + i;
        REQUIRE(message.size() == size);
        CHECK(std::memcmp(message.data(), PatternBytes(size, 100 + i).data(), size) == 0);
      }
      REQUIRE_OK(sent.get());
    }
  }
}

TEST_CASE("RecvInto with a buffer too small leaves the message queued", "[long]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  Pair p = StartPair(daemon, "shm");
  const auto payload = PatternBytes(1 << 20, 3);
  REQUIRE_OK(p.sender->Send(p.s, p.r, 9, std::span<const std::byte>(payload)));
  REQUIRE(WaitUntil([&] { return p.receiver->TryProbe(p.r).ok(); }, milliseconds(10000)));
  std::vector<std::byte> small(1000);
  auto refused = p.receiver->RecvIntoFor(p.r, small, seconds(5));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(refused.status().message(), Catch::Contains("larger than the 1000 byte buffer"));
  MessageInfo probed = REQUIRE_VALUE(p.receiver->TryProbe(p.r));
  CHECK(probed.size == payload.size());
  Buffer message = REQUIRE_VALUE(p.receiver->RecvFor(p.r, seconds(5)));
  CHECK(std::memcmp(message.data(), payload.data(), payload.size()) == 0);
  // A short message into a larger buffer.
  REQUIRE_OK(p.sender->Send(p.s, p.r, 10, Bytes("short")));
  std::vector<std::byte> into(64);
  MessageInfo info = REQUIRE_VALUE(p.receiver->RecvIntoFor(p.r, into, seconds(5)));
  CHECK(info.size == 5);
  CHECK(std::memcmp(into.data(), "short", 5) == 0);
}

TEST_CASE("a receiver's reassembly memory is bounded: the sender waits", "[long]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  // Room for one 3 MiB message at a time. The sender's partial_timeout is
  // short: a receiver that waits for memory says so when probed, and its
  // sender waits longer than that.
  const milliseconds partial_timeout(1000);
  Pair p = StartPair(daemon, GENERATE("shm", "tcp"), size_t{4} << 20, partial_timeout);
  const auto payload = PatternBytes(3 << 20, 4);
  REQUIRE_OK(p.sender->Send(p.s, p.r, 1, std::span<const std::byte>(payload)));
  std::atomic<bool> second_sent{false};
  auto sent = std::async(std::launch::async, [&] {
    Status status = p.sender->Send(p.s, p.r, 2, std::span<const std::byte>(payload));
    second_sent = true;
    return status;
  });
  Buffer first = REQUIRE_VALUE(p.receiver->RecvFor(p.r, seconds(30)));
  CHECK(first.tag() == 1);
  // While the first is held, the second cannot be granted memory.
  CHECK_FALSE(WaitUntil([&] { return second_sent.load(); }, milliseconds(300)));
  first.Release();
  Buffer second = REQUIRE_VALUE(p.receiver->RecvFor(p.r, seconds(30)));
  CHECK(second.tag() == 2);
  CHECK(std::memcmp(second.data(), payload.data(), payload.size()) == 0);
  REQUIRE_OK(sent.get());

  // Larger than the cap: only a RecvInto buffer can take it, and the
  // sender waits for one (many times its partial_timeout here).
  const auto big = PatternBytes(6 << 20, 5);
  std::atomic<bool> big_sent{false};
  auto big_send = std::async(std::launch::async, [&] {
    Status status = p.sender->Send(p.s, p.r, 3, std::span<const std::byte>(big));
    big_sent = true;
    return status;
  });
  CHECK_FALSE(WaitUntil([&] { return big_sent.load(); }, 4 * partial_timeout));
  std::vector<std::byte> into(big.size());
  auto received = REQUIRE_VALUE(p.receiver->RecvIntoFor(p.r, into, seconds(30)));
  REQUIRE_OK(big_send.get());
  CHECK(received.size == big.size());
  CHECK(into == big);
}

TEST_CASE(
    "a long Send to a process that reads nothing fails after partial_timeout, the message "
    "never reaches the thread",
    "[long]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  const std::string networks = GENERATE("shm", "tcp");
  INFO("networks " << networks);
  MsgWorker echo =
      REQUIRE_VALUE(MsgWorker::Start(daemon, MsgWorkerArgs("echo", "e").Subsystems(networks)));
  RuntimeOptions options = RuntimeOptionsFor(daemon, "long-sender", networks);
  options.partial_timeout = milliseconds(1000);
  options.fragment_timeout = milliseconds(250);
  auto sender = REQUIRE_VALUE(StartRuntime(options));
  const Gid me = REQUIRE_VALUE(sender->EnrollThread("me"));
  const Gid target = echo.threads().at(0);
  // Connected first: a stopped process cannot answer the connection either.
  REQUIRE_OK(sender->Send(me, target, 1, Bytes("before")));
  CHECK(Text(REQUIRE_VALUE(sender->RecvFor(me, seconds(10), target, 1))) == "before");

  REQUIRE_OK(echo.child().Signal(SIGSTOP));
  REQUIRE(WaitUntil([&] { return Stopped(echo.pid()); }, seconds(10)));
  const auto payload = PatternBytes(1 << 20, 8);
  const auto started = std::chrono::steady_clock::now();
  Status status = sender->Send(me, target, 2, std::span<const std::byte>(payload));
  const auto waited = std::chrono::steady_clock::now() - started;
  REQUIRE_OK(echo.child().Signal(SIGCONT));
  INFO(status.ToString());
  CHECK(status.code() == StatusCode::kUnavailable);
  CHECK_THAT(status.message(), Catch::Contains("answered nothing about the 1048576 byte message") &&
                                   Catch::Contains("partial_timeout"));
  CHECK(waited >= options.partial_timeout);
  CHECK(waited < options.partial_timeout + seconds(5));

  // Awake again, the receiver finds the start and the sender's abort: the
  // long message never reaches its thread, the pair goes on.
  REQUIRE_OK(sender->Send(me, target, 3, Bytes("after")));
  Buffer reply = REQUIRE_VALUE(sender->RecvFor(me, seconds(10)));
  CHECK(reply.tag() == 3);
  CHECK(Text(reply) == "after");
  CHECK(sender->RecvFor(me, milliseconds(500)).status().code() == StatusCode::kDeadlineExceeded);
  CHECK(echo.Finish(seconds(10)).value_or(-1) == 0);
}

TEST_CASE("long messages: bad sizes and gone receivers are clear errors", "[long]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  Pair p = StartPair(daemon, "shm");
  std::byte one{};
  // Never read: the size is refused first.
  std::span<const std::byte> huge(&one, kMaxMessageBytes + 1);
  Status status = p.sender->Send(p.s, p.r, 1, huge);
  CHECK(status.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(status.message(), Catch::Contains("larger than the limit"));

  REQUIRE_OK(p.receiver->LeaveThread(p.r));
  const auto payload = PatternBytes(1 << 20, 6);
  status = p.sender->Send(p.s, p.r, 1, std::span<const std::byte>(payload));
  CHECK_FALSE(status.ok());
  INFO(status.ToString());
  CHECK((status.code() == StatusCode::kUnavailable ||
         status.code() == StatusCode::kFailedPrecondition));
}

TEST_CASE("a thread that leaves while blocked in RecvInto gets an error, nothing lands later",
          "[long]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  Pair p = StartPair(daemon, "shm");
  auto into = std::make_unique<std::vector<std::byte>>(4 << 20);
  std::atomic<bool> returned{false};
  auto waiting = std::async(std::launch::async, [&] {
    auto result = p.receiver->RecvIntoFor(p.r, *into, seconds(30));
    returned = true;
    return result;
  });
  // Let it post its buffer (a probe of an empty mailbox does not tell;
  // whether it posted or not, leaving must end the wait).
  CHECK_FALSE(WaitUntil([&] { return returned.load(); }, milliseconds(100)));
  REQUIRE_OK(p.receiver->LeaveThread(p.r));
  auto result = waiting.get();
  REQUIRE_FALSE(result.ok());
  CHECK(result.status().code() == StatusCode::kFailedPrecondition);
  into.reset();  // the buffer is gone: nothing may be written into it now
  const auto payload = PatternBytes(2 << 20, 8);
  Status sent = p.sender->Send(p.s, p.r, 1, std::span<const std::byte>(payload));
  CHECK_FALSE(sent.ok());
}

TEST_CASE("a long message to a thread of the same process", "[long]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto runtime = REQUIRE_VALUE(StartRuntime(daemon, "self"));
  Gid a = REQUIRE_VALUE(runtime->EnrollThread("a"));
  Gid b = REQUIRE_VALUE(runtime->EnrollThread("b"));
  const auto payload = PatternBytes(2 << 20, 7);
  REQUIRE_OK(runtime->Send(a, b, 4, std::span<const std::byte>(payload)));
  Buffer message = REQUIRE_VALUE(runtime->RecvFor(b, seconds(5)));
  CHECK(message.size() == payload.size());
  CHECK(std::memcmp(message.data(), payload.data(), payload.size()) == 0);
}

}  // namespace
}  // namespace tocl::testing
