// Buffers and pools, with runtimes in the test process: size classes, a
// received buffer sent on unchanged, buffer states of lvalue sends, a stale
// header replaced on send, pool growth, and the pool cap (fail, wait, wait
// then succeed).
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "buffers/buffer_slot.h"
#include "daemon_harness.h"
#include "messaging_payload.h"
#include "messaging_support.h"
#include "status_assertions.h"
#include "wire/frame.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

// The stats of one class of one network ("" when the runtime has none).
PoolClassStats ClassStats(const Runtime& runtime, std::string_view network, size_t class_bytes) {
  for (const PoolClassStats& stats : runtime.PoolStats()) {
    if (stats.network == network && stats.class_bytes == class_bytes) return stats;
  }
  return {};
}

std::string NetworkOf(const Buffer& buffer) {
  return std::string(NetworkName(buffer.network()));
}

bool Settled(const Buffer& buffer) {
  return buffer.state() == BufferState::kSent || buffer.state() == BufferState::kFailed;
}

// A daemon and two runtimes over shm and tcp, with a thread each.
struct TwoRuntimes {
  TwoRuntimes() {
    REQUIRE_OK(daemon.Start());
    a = REQUIRE_VALUE(StartRuntime(daemon, "a", "shm,tcp"));
    b = REQUIRE_VALUE(StartRuntime(daemon, "b", "shm,tcp"));
    a1 = REQUIRE_VALUE(a->EnrollThread("a1"));
    b1 = REQUIRE_VALUE(b->EnrollThread("b1"));
  }

  Daemon daemon;
  std::unique_ptr<Runtime> a;
  std::unique_ptr<Runtime> b;
  Gid a1;
  Gid b1;
};

TEST_CASE("GetBuffer gives the smallest power-of-two class that holds the payload and header",
          "[integration][msg][pool]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto runtime = REQUIRE_VALUE(StartRuntime(daemon, "classes", "shm,tcp"));
  const size_t max_payload = runtime->short_max_payload();
  CHECK(max_payload < runtime->options().short_max);
  CHECK(max_payload > runtime->options().short_max / 2);

  for (size_t size : {size_t{0}, size_t{1}, size_t{100}, size_t{200}, size_t{1000}, size_t{4096},
                      size_t{5000}, max_payload / 2, max_payload}) {
    INFO("size " << size);
    Buffer buffer = REQUIRE_VALUE(runtime->GetBuffer(size));
    REQUIRE(buffer.valid());
    const size_t cls = buffer.size_class();
    const size_t header = cls - buffer.capacity();
    CHECK((cls & (cls - 1)) == 0);
    CHECK(cls >= 256);
    CHECK(cls <= runtime->options().short_max);
    CHECK(buffer.capacity() >= size);
    // 2^(y-1) < size + header <= 2^y, except that nothing is below 256 B.
    if (cls > 256) CHECK(cls / 2 < size + header);
    CHECK(buffer.state() == BufferState::kIdle);
    CHECK(buffer.size() <= buffer.capacity());
    CHECK(buffer.resize(size));
    CHECK(buffer.size() == size);
    CHECK_FALSE(buffer.resize(buffer.capacity() + 1));
    CHECK(buffer.size() == size);
    // Both networks are open; the fastest is shm.
    CHECK(buffer.network() == Network::kShm);
  }
  Buffer tcp = REQUIRE_VALUE(runtime->GetBuffer(100, Network::kTcp));
  CHECK(tcp.network() == Network::kTcp);
  Buffer shm = REQUIRE_VALUE(runtime->GetBuffer(100, Network::kShm));
  CHECK(shm.network() == Network::kShm);
  Buffer moved = std::move(tcp);
  CHECK(moved.valid());
  CHECK_FALSE(tcp.valid());  // NOLINT(bugprone-use-after-move): moved-from is empty
  moved.Release();
  CHECK_FALSE(moved.valid());
}

TEST_CASE("a received buffer is sent on to a third thread unchanged", "[integration][msg]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto first = REQUIRE_VALUE(StartRuntime(daemon, "first"));
  auto middle = REQUIRE_VALUE(StartRuntime(daemon, "middle"));
  auto last = REQUIRE_VALUE(StartRuntime(daemon, "last"));
  const Gid x = REQUIRE_VALUE(first->EnrollThread("x"));
  const Gid y = REQUIRE_VALUE(middle->EnrollThread("y"));
  const Gid y2 = REQUIRE_VALUE(middle->EnrollThread("y2"));
  const Gid z = REQUIRE_VALUE(last->EnrollThread("z"));

  std::vector<std::byte> payload(3000);
  FillPayload(payload, x, y, /*seq=*/0);
  REQUIRE_OK(first->Send(x, y, 11, std::span<const std::byte>(payload)));
  Buffer received = REQUIRE_VALUE(middle->RecvFor(y, seconds(10)));
  REQUIRE(received.size() == payload.size());
  CHECK(received.source() == x);
  CHECK(received.tag() == 11);
  CHECK(received.state() == BufferState::kIdle);
  const std::byte* const data = received.data();

  SECTION("by rvalue to another process, then on inside that process") {
    REQUIRE_OK(middle->Send(y, z, 12, std::move(received)));
    CHECK_FALSE(received.valid());  // NOLINT(bugprone-use-after-move): the library took it
    Buffer at_z = REQUIRE_VALUE(last->RecvFor(z, seconds(10)));
    CHECK(at_z.source() == y);
    CHECK(at_z.destination() == z);
    CHECK(at_z.tag() == 12);
    REQUIRE(at_z.size() == payload.size());
    CHECK(std::memcmp(at_z.data(), payload.data(), payload.size()) == 0);
    // And on again, within the middle process this time.
    REQUIRE_OK(last->Send(z, y2, 13, std::move(at_z)));
    Buffer at_y2 = REQUIRE_VALUE(middle->RecvFor(y2, seconds(10)));
    CHECK(at_y2.source() == z);
    REQUIRE(at_y2.size() == payload.size());
    CHECK(std::memcmp(at_y2.data(), payload.data(), payload.size()) == 0);
  }
  SECTION("by lvalue, twice: the handle stays the caller's and its bytes stay put") {
    REQUIRE_OK(middle->Send(y, z, 12, received));
    REQUIRE(received.valid());
    CHECK(WaitUntil([&] { return Settled(received); }, seconds(10)));
    CHECK(received.state() == BufferState::kSent);
    CHECK(received.data() == data);  // the same memory: nothing was copied into a new buffer
    REQUIRE(received.size() == payload.size());
    CHECK(std::memcmp(received.data(), payload.data(), payload.size()) == 0);
    REQUIRE_OK(middle->Send(y, y2, 14, received));
    CHECK(WaitUntil([&] { return Settled(received); }, seconds(10)));
    CHECK(received.state() == BufferState::kSent);
    for (auto [runtime, self, tag] :
         {std::tuple{last.get(), z, Tag{12}}, std::tuple{middle.get(), y2, Tag{14}}}) {
      Buffer got = REQUIRE_VALUE(runtime->RecvFor(self, seconds(10)));
      CHECK(got.source() == y);
      CHECK(got.tag() == tag);
      REQUIRE(got.size() == payload.size());
      CHECK(std::memcmp(got.data(), payload.data(), payload.size()) == 0);
    }
  }
}

TEST_CASE_METHOD(
    TwoRuntimes,
    "a buffer sent by lvalue goes from queued or in flight to sent and may be sent again",
    "[integration][msg]") {
  for (Network network : {Network::kShm, Network::kTcp}) {
    INFO(NetworkName(network));
    Buffer buffer = REQUIRE_VALUE(a->GetBuffer(5, network));
    std::memcpy(buffer.data(), "hello", 5);
    REQUIRE(buffer.resize(5));
    CHECK(buffer.state() == BufferState::kIdle);
    for (int round = 0; round < 3; ++round) {
      REQUIRE_OK(a->Send(a1, b1, 3, buffer));
      const BufferState right_after = buffer.state();
      CHECK(right_after != BufferState::kIdle);
      CHECK(right_after != BufferState::kFailed);
      REQUIRE(WaitUntil([&] { return Settled(buffer); }, seconds(10)));
      CHECK(buffer.state() == BufferState::kSent);
      CHECK(buffer.destination() == b1);
      CHECK(buffer.tag() == 3);
      Buffer got = REQUIRE_VALUE(b->RecvFor(b1, seconds(10)));
      CHECK(Text(got) == "hello");
      CHECK(got.state() == BufferState::kIdle);
    }
  }
}

TEST_CASE_METHOD(
    TwoRuntimes,
    "a buffer whose header holds another frame's fields is sent with a header of its own",
    "[integration][msg]") {
  uint64_t seq = 0;  // the pair's, over both networks
  for (Network network : {Network::kShm, Network::kTcp}) {
    INFO(NetworkName(network));
    Buffer buffer = REQUIRE_VALUE(a->GetBuffer(5, network));
    std::memcpy(buffer.data(), "hello", 5);
    REQUIRE(buffer.resize(5));
    // What a buffer may hold from before (a frame received into it, an
    // application that wrote past its payload): none of it may go out, or
    // the receiver refuses the frame.
    wire::Header& header = buffer.slot()->header();
    header.kind = wire::FrameKind::kFragment;
    header.flags = 0x8001;
    header.tag = 99;
    header.seq = 12345;
    header.offset = 4096;
    header.total = uint64_t{1} << 20;
    header.reserved = 9;
    REQUIRE_OK(a->Send(a1, b1, 3, buffer));
    REQUIRE(WaitUntil([&] { return Settled(buffer); }, seconds(10)));
    CHECK(buffer.state() == BufferState::kSent);
    const wire::Header expected = wire::MessageHeader(a1, b1, 3, 5, seq++);
    CHECK(std::memcmp(&buffer.slot()->header(), &expected, sizeof expected) == 0);
    Buffer got = REQUIRE_VALUE(b->RecvFor(b1, seconds(10)));
    CHECK(Text(got) == "hello");
    CHECK(got.source() == a1);
    CHECK(got.tag() == 3);
  }
}

TEST_CASE("a buffer sent by lvalue to a thread of the same process ends sent, like any other",
          "[integration][msg]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto runtime = REQUIRE_VALUE(StartRuntime(daemon, "self", "shm,tcp"));
  const Gid a1 = REQUIRE_VALUE(runtime->EnrollThread("a1"));
  const Gid a2 = REQUIRE_VALUE(runtime->EnrollThread("a2"));

  for (Network network : {Network::kShm, Network::kTcp}) {
    INFO(NetworkName(network));
    Buffer buffer = REQUIRE_VALUE(runtime->GetBuffer(5, network));
    std::memcpy(buffer.data(), "local", 5);
    REQUIRE(buffer.resize(5));
    CHECK(buffer.state() == BufferState::kIdle);
    for (int round = 0; round < 3; ++round) {
      REQUIRE_OK(runtime->Send(a1, a2, 4, buffer));
      // The copy is in a2's mailbox when Send returns: nothing is in flight.
      CHECK(buffer.state() == BufferState::kSent);
      CHECK(buffer.destination() == a2);
      CHECK(buffer.source() == a1);
      CHECK(buffer.tag() == 4);
      // The caller may write to it now; the receiver has its own copy.
      buffer.data()[0] = std::byte{'L'};
      Buffer got = REQUIRE_VALUE(runtime->RecvFor(a2, seconds(10), a1, 4));
      CHECK(Text(got) == (round == 0 ? "local" : "Local"));
      CHECK(got.state() == BufferState::kIdle);
    }
  }
  // A send that fails (the thread left) leaves the state as it was.
  REQUIRE_OK(runtime->LeaveThread(a2));
  Buffer fresh = REQUIRE_VALUE(runtime->GetBuffer(1));
  REQUIRE(fresh.resize(1));
  CHECK_FALSE(runtime->Send(a1, a2, 4, fresh).ok());
  CHECK(fresh.state() == BufferState::kIdle);
}

TEST_CASE("a pool grows when its buffers are all taken", "[integration][msg][pool]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto runtime = REQUIRE_VALUE(StartRuntime(daemon, "grower", "shm,tcp"));

  for (Network network : {Network::kShm, Network::kTcp}) {
    const std::string name(NetworkName(network));
    INFO(name);
    Buffer probe = REQUIRE_VALUE(runtime->GetBuffer(1000, network));
    const size_t cls = probe.size_class();
    probe.Release();
    const PoolClassStats before = ClassStats(*runtime, name, cls);
    INFO("class " << cls << ": grown " << before.grown << ", free " << before.free << ", in use "
                  << before.in_use);

    constexpr size_t kHeld = 2000;
    std::vector<Buffer> held;
    for (size_t i = 0; i < kHeld; ++i) {
      held.push_back(REQUIRE_VALUE(runtime->GetBuffer(1000, network, AtCap::kFail)));
      REQUIRE(held.back().size_class() == cls);
      REQUIRE(NetworkOf(held.back()) == name);
    }
    const PoolClassStats during = ClassStats(*runtime, name, cls);
    INFO("while held: grown " << during.grown << ", free " << during.free << ", in use "
                              << during.in_use << ", registered " << during.bytes_registered);
    CHECK(during.grown > before.grown);
    CHECK(during.in_use >= before.in_use + kHeld);
    CHECK(during.bytes_registered >= kHeld * cls);

    held.clear();
    const PoolClassStats after = ClassStats(*runtime, name, cls);
    INFO("after: grown " << after.grown << ", free " << after.free << ", in use " << after.in_use);
    CHECK(after.in_use <= before.in_use);
    CHECK(after.free >= kHeld);
    CHECK(after.grown >= during.grown);
  }
}

TEST_CASE("at the pool cap GetBuffer fails or waits as asked, and succeeds once buffers return",
          "[integration][msg][pool]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  RuntimeOptions options = RuntimeOptionsFor(daemon, "capped", "shm");
  options.pool_cap = size_t{8} << 20;
  auto runtime = REQUIRE_VALUE(StartRuntime(options));
  const size_t payload = 16 * 1024;

  std::vector<Buffer> held;
  Status at_cap;
  const size_t most = options.pool_cap / payload + 10;
  for (size_t i = 0; i < most; ++i) {
    auto buffer = runtime->GetBuffer(payload, Network::kFastest, AtCap::kFail);
    if (!buffer.ok()) {
      at_cap = buffer.status();
      break;
    }
    held.push_back(std::move(*buffer));
  }
  INFO("held " << held.size() << " buffers; then " << at_cap.ToString());
  REQUIRE(at_cap.code() == StatusCode::kResourceExhausted);
  REQUIRE_FALSE(held.empty());
  CHECK(held.size() * held.front().size_class() <= options.pool_cap);
  uint64_t registered = 0;
  for (const PoolClassStats& stats : runtime->PoolStats()) registered += stats.bytes_registered;
  CHECK(registered <= options.pool_cap);
  // Other classes are at the cap too, and nothing breaks for asking.
  for (size_t size : {size_t{10}, size_t{1000}, size_t{30000}}) {
    auto again = runtime->GetBuffer(size, Network::kFastest, AtCap::kFail);
    if (!again.ok()) CHECK(again.status().code() == StatusCode::kResourceExhausted);
  }

  // kWait with a short timeout times out after about that long.
  const auto timeout = milliseconds(200);
  auto start = steady_clock::now();
  auto waited = runtime->GetBuffer(payload, Network::kFastest, AtCap::kWait, timeout);
  auto elapsed = steady_clock::now() - start;
  const auto elapsed_ms = std::chrono::duration_cast<milliseconds>(elapsed).count();
  INFO("GetBuffer(kWait, 200 ms) -> " << waited.status().ToString() << " after " << elapsed_ms
                                      << " ms");
  CHECK(waited.status().code() == StatusCode::kDeadlineExceeded);
  CHECK(elapsed >= timeout);
  CHECK(elapsed < timeout + seconds(5));

  // A waiter gets a buffer once one comes back (whether it was already
  // waiting when the buffer came back or not).
  std::atomic<bool> started{false};
  Result<Buffer> late = Internal("not yet");
  std::jthread waiter([&] {
    started = true;
    late = runtime->GetBuffer(payload, Network::kFastest, AtCap::kWait, seconds(30));
  });
  REQUIRE(WaitUntil([&] { return started.load(); }, seconds(5)));
  held.pop_back();
  waiter.join();
  REQUIRE_OK(late);
  CHECK(late->capacity() >= payload);
  late->Release();

  // Everything back: the pool serves again without waiting.
  held.clear();
  for (int i = 0; i < 10; ++i) {
    CHECK_OK(runtime->GetBuffer(payload, Network::kFastest, AtCap::kFail));
  }
}

TEST_CASE_METHOD(TwoRuntimes,
                 "messages from one thread in buffers of both networks arrive in send order",
                 "[integration][msg][shm][tcp]") {
  const int count = static_cast<int>(MessageCount(3000, 600));
  std::mt19937 random(7);

  // Runs of shm buffers and tcp buffers of random sizes: each network
  // delivers at its own pace, the receiver must still see send order.
  std::jthread sender([&] {
    for (int i = 0; i < count; ++i) {
      const Network network = (i / 7) % 2 == 0 ? Network::kShm : Network::kTcp;
      const size_t size = kPayloadHeaderBytes + random() % 3000;
      auto buffer = a->GetBuffer(size, network);
      if (!buffer.ok() || !buffer->resize(size)) return;
      FillPayload(buffer->span(), a1, b1, static_cast<uint64_t>(i));
      if (!a->Send(a1, b1, 1 + i % 3, std::move(*buffer)).ok()) return;
    }
  });
  for (int i = 0; i < count; ++i) {
    auto message = b->RecvFor(b1, seconds(20));
    if (!message.ok()) FAIL("message " << i << ": " << message.status().ToString());
    const std::string problem = CheckPayload(message->span(), a1, b1);
    if (!problem.empty()) FAIL("message " << i << ": " << problem);
    const uint64_t seq = ReadPayloadHeader(message->span()).seq;
    if (seq != static_cast<uint64_t>(i)) FAIL("message " << seq << " where " << i << " was due");
    CHECK(message->tag() == static_cast<Tag>(1 + i % 3));
  }
  sender.join();
  CHECK(b->TryRecv(b1).status().code() == StatusCode::kTryAgain);
}

}  // namespace
}  // namespace tocl::testing
