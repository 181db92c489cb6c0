// The receive side without a daemon or networks: mailboxes, matching,
// unexpected-memory accounting, and the wait policy (deadlines, wake-ups,
// shutting down) with a real progress engine that has nothing to poll.
#include "runtime/receive_side.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "buffers/buffer_pool.h"
#include "buffers/large_slot.h"
#include "buffers/size_class.h"
#include "part_fixtures.h"
#include "runtime/epoll_reactor.h"
#include "runtime/internal_threads.h"
#include "subsystem/subsystem.h"
#include "wire/frame.h"

namespace tocl::runtime {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr Gid kProcess = Gid::Process(1, 7);
constexpr Gid kSender = Gid::Thread(1, 2, 3);
constexpr Gid kOtherSender = Gid::Thread(1, 5, 1);
const size_t kFrameBytes = buffers::ClassBytes(0);

// A network whose poll round delivers the frames a test put in it, on the
// thread that polls (as shm's Drain does).
class FakeNetwork final : public FakeSubsystem {
 public:
  explicit FakeNetwork(buffers::BufferPool& pool) : FakeSubsystem(pool) {}
  void Attach(ReceiveSide& receive) { receive_ = &receive; }
  void Arrive(buffers::SlotRef slot) {
    std::lock_guard lock(mu_);
    frames_.push_back(std::move(slot));
  }
  int Poll() override {
    std::vector<buffers::SlotRef> round;
    {
      std::lock_guard lock(mu_);
      round.swap(frames_);
    }
    // Any thread may poll (Catch's assertions are the test thread's).
    for (auto& slot : round) {
      if (!receive_->Deliver(slot).ok()) refused.fetch_add(1);
    }
    return static_cast<int>(round.size());
  }
  bool PrepareToSleep() override {
    std::lock_guard lock(mu_);
    return frames_.empty();
  }

  std::atomic<int> refused{0};

 private:
  ReceiveSide* receive_ = nullptr;
  std::mutex mu_;
  std::vector<buffers::SlotRef> frames_;
};

struct Fixture : PoolAndPoller {
  // `start_progress` false: no progress thread, so the receiving thread is
  // the only one that ever polls (the hand-off tests need that).
  explicit Fixture(size_t cap = 64 * kFrameBytes, bool start_progress = true)
      : receive(cap, 50us, shutting_down,
                ReceiveSide::Hooks{
                    .wake_poller = [this] { ++poller_wakes; },
                    .receive_posted = [this] { ++posted; },
                    .unbind_posted = [](PostedReceive&) { return true; },
                }) {
    receive.SetProcess(kProcess);
    receive.AttachProgress(progress);
    network.Attach(receive);
    progress.AddSubsystem(&network);
    if (start_progress) progress.Start();
    receive.AddThread(kMe);
  }
  ~Fixture() { progress.Stop(); }

  // A short message from `source` to `to` with `text` as its payload.
  buffers::SlotRef Message(Gid source, Tag tag, std::string_view text, Gid to = kMe) {
    buffers::SlotRef slot(pool.TryGet(0));
    REQUIRE(slot);
    wire::Header& header = slot->header();
    header.kind = wire::FrameKind::kMessage;
    header.source = source.raw();
    header.destination = to.raw();
    header.tag = tag;
    header.length = static_cast<uint32_t>(text.size());
    header.total = header.length;
    std::memcpy(slot->payload(), text.data(), text.size());
    return slot;
  }
  Status Deliver(Gid source, Tag tag, std::string_view text, Gid to = kMe) {
    buffers::SlotRef slot = Message(source, tag, text, to);
    return receive.Deliver(slot);
  }
  static std::string Text(const Buffer& buffer) {
    return std::string(reinterpret_cast<const char*>(buffer.data()), buffer.size());
  }
  uint64_t InUse() const { return pool.Stats()[0].in_use; }

  static constexpr Gid kMe = Gid::Thread(1, 7, 1);
  std::atomic<bool> shutting_down{false};
  std::atomic<int> poller_wakes{0};
  std::atomic<int> posted{0};
  ReceiveSide receive;
  FakeNetwork network{pool};
};

TEST_CASE("a message already there is received at once and leaves the unexpected count",
          "[receive]") {
  Fixture f;
  REQUIRE(f.Deliver(kSender, 5, "hello").ok());
  CHECK(f.receive.unexpected_bytes().load() == kFrameBytes);
  auto got = f.receive.Receive(Fixture::kMe, Selector{}, Clock::now(), /*blocking=*/false);
  REQUIRE(got.ok());
  CHECK(Fixture::Text(*got) == "hello");
  CHECK(got->source() == kSender);
  CHECK(got->tag() == 5);
  CHECK(f.receive.unexpected_bytes().load() == 0);
  got->Release();
  CHECK(f.InUse() == 0);
}

TEST_CASE("matching takes the first message of the source and tag asked for, others stay in order",
          "[receive]") {
  Fixture f;
  REQUIRE(f.Deliver(kSender, 1, "a1").ok());
  REQUIRE(f.Deliver(kOtherSender, 2, "b2").ok());
  REQUIRE(f.Deliver(kSender, 2, "a2").ok());
  REQUIRE(f.Deliver(kOtherSender, 1, "b1").ok());
  auto by_tag = f.receive.Receive(Fixture::kMe, Selector{Gid(), 2}, Clock::now(), false);
  REQUIRE(by_tag.ok());
  CHECK(Fixture::Text(*by_tag) == "b2");
  auto by_source = f.receive.Receive(Fixture::kMe, Selector{kSender, kAnyTag}, Clock::now(), false);
  REQUIRE(by_source.ok());
  CHECK(Fixture::Text(*by_source) == "a1");
  auto by_process =
      f.receive.Receive(Fixture::kMe, Selector{kOtherSender.process(), 1}, Clock::now(), false);
  REQUIRE(by_process.ok());
  CHECK(Fixture::Text(*by_process) == "b1");
  auto rest = f.receive.Receive(Fixture::kMe, Selector{}, Clock::now(), false);
  REQUIRE(rest.ok());
  CHECK(Fixture::Text(*rest) == "a2");
  auto none = f.receive.Receive(Fixture::kMe, Selector{}, Clock::now(), false);
  CHECK(none.status().code() == StatusCode::kTryAgain);
}

TEST_CASE("a probe leaves the message, a timed receive with nothing there ends at its deadline",
          "[receive]") {
  Fixture f;
  auto empty = f.receive.Probe(Fixture::kMe, Selector{}, Clock::now(), false);
  CHECK(empty.status().code() == StatusCode::kTryAgain);
  const auto start = Clock::now();
  auto late = f.receive.Receive(Fixture::kMe, Selector{}, start + 30ms, true);
  CHECK(late.status().code() == StatusCode::kDeadlineExceeded);
  CHECK(Clock::now() - start >= 30ms);
  REQUIRE(f.Deliver(kSender, 3, "there").ok());
  auto info = f.receive.Probe(Fixture::kMe, Selector{kSender, 3}, Clock::now() + 1s, true);
  REQUIRE(info.ok());
  CHECK(info->source == kSender);
  CHECK(info->size == 5);
  auto got = f.receive.Receive(Fixture::kMe, Selector{}, Clock::now(), false);
  REQUIRE(got.ok());
  CHECK(Fixture::Text(*got) == "there");
}

TEST_CASE("a receiver waiting in Recv gets a message delivered from another thread", "[receive]") {
  Fixture f;
  std::atomic<bool> received{false};
  std::string text;
  std::thread receiver([&] {
    auto got = f.receive.Receive(Fixture::kMe, Selector{kSender, 9}, Clock::now() + 10s, true);
    if (got.ok()) text = Fixture::Text(*got);
    received = got.ok();
  });
  // Another source and tag first: it must not end the wait.
  REQUIRE(f.Deliver(kOtherSender, 9, "not this").ok());
  REQUIRE(f.Deliver(kSender, 9, "this").ok());
  receiver.join();
  CHECK(received);
  CHECK(text == "this");
  CHECK(f.receive.unexpected_bytes().load() == kFrameBytes);  // "not this" waits
}

TEST_CASE("an idle receiver (past its eager time) still wakes for a delivery", "[receive]") {
  Fixture f;
  // 150 ms with nothing: the receiver is idle and sleeps on its mailbox
  // (kEagerWait is 100 ms); the delivery must wake it well before 10 s.
  // Catch's assertions are for the test's thread: the receiver records.
  std::atomic<bool> waited{false};
  StatusCode first_code = StatusCode::kOk;
  Status got_status;
  std::thread receiver([&] {
    first_code =
        f.receive.Receive(Fixture::kMe, Selector{}, Clock::now() + 150ms, true).status().code();
    waited = true;
    got_status = f.receive.Receive(Fixture::kMe, Selector{}, Clock::now() + 10s, true).status();
  });
  while (!waited) std::this_thread::yield();
  const auto sent = Clock::now();
  REQUIRE(f.Deliver(kSender, 1, "late").ok());
  receiver.join();
  CHECK(first_code == StatusCode::kDeadlineExceeded);
  CHECK(got_status.ok());
  CHECK(Clock::now() - sent < 5s);
}

TEST_CASE("over the cap the process is congested, receiving below it wakes the poller once",
          "[receive]") {
  Fixture f(2 * kFrameBytes);
  for (int i = 0; i < 3; ++i) REQUIRE(f.Deliver(kSender, 1, "x").ok());
  CHECK(f.receive.Congested());
  CHECK(f.poller_wakes == 0);
  auto a = f.receive.Receive(Fixture::kMe, Selector{}, Clock::now(), false);
  REQUIRE(a.ok());
  CHECK_FALSE(f.receive.Congested());
  CHECK(f.poller_wakes == 1);
  auto b = f.receive.Receive(Fixture::kMe, Selector{}, Clock::now(), false);
  REQUIRE(b.ok());
  CHECK(f.poller_wakes == 1);
}

TEST_CASE("a thread that leaves drops what waits for it, later deliveries are refused",
          "[receive]") {
  Fixture f;
  REQUIRE(f.Deliver(kSender, 1, "one").ok());
  REQUIRE(f.Deliver(kSender, 1, "two").ok());
  CHECK(f.receive.Leave(Fixture::kMe));
  CHECK_FALSE(f.receive.Leave(Fixture::kMe));  // once
  CHECK(f.receive.unexpected_bytes().load() == 0);
  CHECK(f.InUse() == 0);
  buffers::SlotRef refused = f.Message(kSender, 1, "three");
  Status status = f.receive.Deliver(refused);
  CHECK(status.code() == StatusCode::kFailedPrecondition);
  CHECK(refused);  // still the caller's
  CHECK(f.receive.unexpected_bytes().load() == 0);
  refused.reset();
  CHECK(f.InUse() == 0);
  auto after = f.receive.Receive(Fixture::kMe, Selector{}, Clock::now(), false);
  CHECK(after.status().code() == StatusCode::kFailedPrecondition);
}

TEST_CASE("receiving as a thread that is not ours, reserved, never enrolled or gone is refused",
          "[receive]") {
  Fixture f;
  CHECK(f.receive.LocalMailbox(kSender).status().code() == StatusCode::kInvalidArgument);
  CHECK(f.receive.LocalMailbox(kProcess).status().code() == StatusCode::kInvalidArgument);
  CHECK(f.receive.LocalMailbox(Gid::Thread(1, 7, kServiceThread)).status().code() ==
        StatusCode::kInvalidArgument);
  auto never = f.receive.LocalMailbox(Gid::Thread(1, 7, 42));
  CHECK(never.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(never.status().message(), Catch::Contains("never enrolled"));
  buffers::SlotRef nobody = f.Message(kSender, 1, "x", Gid::Thread(1, 7, 42));
  CHECK(f.receive.Deliver(nobody).code() == StatusCode::kNotFound);
  CHECK(nobody);
  REQUIRE(f.receive.LocalMailbox(Fixture::kMe).ok());
}

TEST_CASE("shutting down ends a blocked receive with Cancelled", "[receive]") {
  Fixture f;
  Status result;
  std::thread receiver([&] {
    result = f.receive.Receive(Fixture::kMe, Selector{}, Clock::time_point::max(), true).status();
  });
  f.shutting_down = true;
  f.receive.WakeAll();
  receiver.join();
  CHECK(result.code() == StatusCode::kCancelled);
}

TEST_CASE("RecvInto copies a short message, one too large stays queued with a clear error",
          "[receive]") {
  Fixture f;
  REQUIRE(f.Deliver(kSender, 4, "0123456789").ok());
  std::vector<std::byte> small(4);
  auto refused = f.receive.ReceiveInto(Fixture::kMe, Selector{}, small, Clock::now() + 1s);
  CHECK(refused.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(refused.status().message(), Catch::Contains("10 bytes"));
  CHECK_THAT(refused.status().message(), Catch::Contains("stays queued"));
  std::vector<std::byte> big(64);
  auto info = f.receive.ReceiveInto(Fixture::kMe, Selector{}, big, Clock::now() + 1s);
  REQUIRE(info.ok());
  CHECK(info->size == 10);
  CHECK(info->tag == 4);
  CHECK(std::memcmp(big.data(), "0123456789", 10) == 0);
  CHECK(f.receive.unexpected_bytes().load() == 0);
  CHECK(f.InUse() == 0);
  // Nothing there: the posted receive is announced (long messages may bind).
  auto none = f.receive.ReceiveInto(Fixture::kMe, Selector{}, big, Clock::now() + 10ms);
  CHECK(none.status().code() == StatusCode::kDeadlineExceeded);
  CHECK(f.posted == 1);
}

// The hand-off: with no progress thread, the receiver polls for itself;
// its mailbox's signal moves only when something is queued there.
TEST_CASE("a match the receiver's own poll round brings is handed over without the mailbox",
          "[receive]") {
  Fixture f(64 * kFrameBytes, /*start_progress=*/false);
  Mailbox& mailbox = *f.receive.Find(Fixture::kMe);
  f.network.Arrive(f.Message(kSender, 1, "m1"));
  const uint32_t before = mailbox.signal();
  auto got = f.receive.Receive(Fixture::kMe, Selector{kSender, 1}, Clock::now() + 10s, true);
  REQUIRE(got.ok());
  CHECK(Fixture::Text(*got) == "m1");
  CHECK(mailbox.signal() == before);  // never queued
  CHECK(f.receive.unexpected_bytes().load() == 0);
  // One round brings three of one pair: the first is handed over, the
  // others are queued behind it; all come out in order.
  f.network.Arrive(f.Message(kSender, 1, "m2"));
  f.network.Arrive(f.Message(kSender, 1, "m3"));
  f.network.Arrive(f.Message(kSender, 1, "m4"));
  for (const char* want : {"m2", "m3", "m4"}) {
    auto next = f.receive.Receive(Fixture::kMe, Selector{kSender, 1}, Clock::now() + 10s, true);
    REQUIRE(next.ok());
    CHECK(Fixture::Text(*next) == want);
  }
  CHECK(mailbox.signal() == before + 2);  // m3 and m4 were queued
  CHECK(f.receive.unexpected_bytes().load() == 0);
  got->Release();
  CHECK(f.InUse() == 0);
  CHECK(f.network.refused == 0);
}

TEST_CASE("a message the receiver's poll round brings that it does not want is queued",
          "[receive]") {
  Fixture f(64 * kFrameBytes, /*start_progress=*/false);
  f.network.Arrive(f.Message(kOtherSender, 1, "other"));
  f.network.Arrive(f.Message(kSender, 2, "wanted"));
  auto got = f.receive.Receive(Fixture::kMe, Selector{kSender, 2}, Clock::now() + 10s, true);
  REQUIRE(got.ok());
  CHECK(Fixture::Text(*got) == "wanted");
  auto info = f.receive.Probe(Fixture::kMe, Selector{}, Clock::now(), false);
  REQUIRE(info.ok());
  CHECK(info->source == kOtherSender);
  auto rest = f.receive.Receive(Fixture::kMe, Selector{}, Clock::now(), false);
  REQUIRE(rest.ok());
  CHECK(Fixture::Text(*rest) == "other");
  CHECK(f.receive.unexpected_bytes().load() == 0);
  CHECK(f.network.refused == 0);
}

TEST_CASE("a message is not handed over past its sender's long message still arriving",
          "[receive]") {
  Fixture f(64 * kFrameBytes, /*start_progress=*/false);
  Mailbox& mailbox = *f.receive.Find(Fixture::kMe);
  // A long message of the pair is queued and still arriving: it hides the
  // sender's later messages, so the short one that the round brings must
  // not overtake it.
  auto made = buffers::NewLargeSlot(&f.pool, 100, nullptr, nullptr);
  REQUIRE(made.ok());
  buffers::LargeSlot* large = *made;
  large->header().source = kSender.raw();
  large->header().destination = Fixture::kMe.raw();
  large->header().tag = 1;
  large->set_state(BufferState::kInFlight);
  REQUIRE(mailbox.Deliver(large));
  f.network.Arrive(f.Message(kSender, 1, "short"));
  auto early = f.receive.Receive(Fixture::kMe, Selector{kSender, 1}, Clock::now() + 50ms, true);
  CHECK(early.status().code() == StatusCode::kDeadlineExceeded);
  // The long message completes: it comes first, then the short one.
  large->set_state(BufferState::kIdle);
  mailbox.Wake();
  auto first = f.receive.Receive(Fixture::kMe, Selector{kSender, 1}, Clock::now() + 10s, true);
  REQUIRE(first.ok());
  CHECK(buffers::IsLarge(first->slot()));
  auto second = f.receive.Receive(Fixture::kMe, Selector{kSender, 1}, Clock::now() + 10s, true);
  REQUIRE(second.ok());
  CHECK(Fixture::Text(*second) == "short");
  CHECK(f.network.refused == 0);
}

TEST_CASE("TryRecv takes what its one poll round brings", "[receive]") {
  Fixture f(64 * kFrameBytes, /*start_progress=*/false);
  Mailbox& mailbox = *f.receive.Find(Fixture::kMe);
  const uint32_t before = mailbox.signal();
  f.network.Arrive(f.Message(kSender, 3, "now"));
  auto got = f.receive.Receive(Fixture::kMe, Selector{}, Clock::now(), /*blocking=*/false);
  REQUIRE(got.ok());
  CHECK(Fixture::Text(*got) == "now");
  CHECK(mailbox.signal() == before);  // handed over
  CHECK(f.receive.unexpected_bytes().load() == 0);
  CHECK(f.network.refused == 0);
}

}  // namespace
}  // namespace tocl::runtime
