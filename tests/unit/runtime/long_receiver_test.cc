// The receiving side of long messages without a daemon or networks: a real
// receive side and pool, frames made by the test, and the control frames
// the receiver sends recorded by a fake of its Events. Grants by memory and
// in arrival order, fragments put in place (duplicates and strays
// dropped), messages given up by silence, and a RecvInto that gives up.
#include "runtime/long_receiver.h"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "buffers/buffer_pool.h"
#include "buffers/size_class.h"
#include "part_fixtures.h"
#include "runtime/epoll_reactor.h"
#include "runtime/progress_engine.h"
#include "runtime/receive_side.h"
#include "subsystem/subsystem.h"
#include "wire/frame.h"

namespace tocl::runtime {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr Gid kProcess = Gid::Process(1, 7);
constexpr Gid kMe = Gid::Thread(kProcess, 1);
constexpr Gid kSenderProcess = Gid::Process(2, 5);
constexpr Gid kSender = Gid::Thread(kSenderProcess, 3);
constexpr uint64_t kFragment = 1000;
constexpr Tag kTag = 5;
constexpr int kNetwork = 1;  // the network the test's fragments come by

// A network whose poll round runs what the test queued for it, on the
// polling thread (as a frame arriving would): the receiver's frames while
// a RecvInto waits.
class FakeNetwork final : public FakeSubsystem {
 public:
  explicit FakeNetwork(buffers::BufferPool& pool) : FakeSubsystem(pool) {}
  void Then(std::function<void()> arrival) {
    std::lock_guard lock(mu_);
    arrivals_.push_back(std::move(arrival));
  }
  int Poll() override {
    std::vector<std::function<void()>> round;
    {
      std::lock_guard lock(mu_);
      round.swap(arrivals_);
    }
    for (auto& arrival : round) arrival();
    return static_cast<int>(round.size());
  }
  bool PrepareToSleep() override {
    std::lock_guard lock(mu_);
    return arrivals_.empty();
  }

 private:
  std::mutex mu_;
  std::vector<std::function<void()>> arrivals_;
};

// A control frame the receiver sent.
struct Sent {
  Gid process;
  int network;
  wire::Header header;
};

struct Fixture : PoolAndPoller, LongReceiver::Events {
  explicit Fixture(LongReceiver::Limits limits = {.reassembly_cap = 1 << 20})
      : receive(size_t{1} << 20, 50us, shutting_down,
                ReceiveSide::Hooks{
                    .wake_poller = [] {},
                    .receive_posted = [this] { receiver.NoteReceivePosted(); },
                    .unbind_posted =
                        [this](PostedReceive& post) { return receiver.UnbindPosted(post); },
                }),
        receiver(limits, receive, *this) {
    receive.SetProcess(kProcess);
    receive.AttachProgress(progress);
    progress.AddSubsystem(&network);
    receive.AddThread(kMe);
    receiver.AttachPool(pool);
  }
  // As the runtime does: our references, then the mailboxes' (whose
  // memory tells the receiver when it is freed).
  ~Fixture() {
    receiver.Clear();
    receive.LeaveAll();
  }

  // --- LongReceiver::Events ---
  void SendControl(Gid process, int via, const wire::Header& header) override {
    sent.push_back(Sent{process, via, header});
  }
  Status SkipInOrder(Gid from_process, const LongKey& key) override {
    skipped.push_back(key);
    return from_process == kSenderProcess ? Status::Ok() : InvalidArgument("not the sender");
  }
  void HousekeepingDue(bool wake) override { (wake ? woken : noted).fetch_add(1); }

  // --- frames from kSender ---
  buffers::SlotRef Start(uint64_t seq, uint64_t total) {
    buffers::SlotRef slot(pool.TryGet(0));
    REQUIRE(slot);
    slot->header() = wire::LongStartHeader(kSender, kMe, kTag, total, kFragment, seq);
    return slot;
  }
  // Fragment `index` of message `seq` (`total` bytes), every byte `fill`.
  buffers::SlotRef Fragment(uint64_t seq, uint64_t total, uint64_t index, char fill) {
    const uint64_t offset = index * kFragment;
    const uint64_t length = std::min(kFragment, total - offset);
    buffers::SlotRef slot(pool.TryGet(buffers::ClassFor(length)));
    REQUIRE(slot);
    slot->header() =
        wire::FragmentHeader(kSender, kMe, kTag, seq, offset, static_cast<uint32_t>(length), total);
    std::memset(slot->payload(), fill, length);
    return slot;
  }
  Status Arrive(uint64_t seq, uint64_t total, uint64_t index, char fill) {
    return receiver.OnFragment(kNetwork, kSenderProcess, Fragment(seq, total, index, fill));
  }
  // The sender's control frame about message `seq`.
  Status FromSender(wire::FrameKind kind, Tag tag, uint64_t seq) {
    return receiver.OnControl(kNetwork, kSenderProcess,
                              wire::ControlHeader(kind, kSender, kMe, seq, tag));
  }

  // The sequence numbers of the frames of `kind` sent so far, in order.
  std::vector<uint64_t> SentSeqs(wire::FrameKind kind) const {
    std::vector<uint64_t> seqs;
    for (const Sent& frame : sent) {
      if (frame.header.kind == kind) seqs.push_back(frame.header.seq);
    }
    return seqs;
  }
  // The message waiting for kMe, if one is complete.
  Result<Buffer> TryReceive() {
    return receive.Receive(kMe, Selector{}, Clock::now(), /*blocking=*/false);
  }
  static std::string Text(const Buffer& buffer) {
    return std::string(reinterpret_cast<const char*>(buffer.data()), buffer.size());
  }

  FakeNetwork network{pool};
  std::atomic<bool> shutting_down{false};
  std::vector<Sent> sent;
  std::vector<LongKey> skipped;
  std::atomic<int> noted{0};
  std::atomic<int> woken{0};
  ReceiveSide receive;
  LongReceiver receiver;
};

using Seqs = std::vector<uint64_t>;

TEST_CASE(
    "a start is granted while library memory allows, and waiting starts are granted in the "
    "order they came",
    "[long]") {
  Fixture f({.reassembly_cap = 3000});
  REQUIRE(f.receiver.OnLongStart(kSenderProcess, f.Start(0, 2000)).ok());
  CHECK(f.SentSeqs(wire::FrameKind::kGrant) == Seqs{0});
  CHECK(f.receiver.reassembly_used() == 2000);
  const Sent& grant = f.sent.front();
  CHECK(grant.process == kSenderProcess);
  CHECK(grant.header.source == kMe.raw());  // from the receiving thread to the sending one
  CHECK(grant.header.destination == kSender.raw());

  // 2000 more would pass the cap; 500 would not, but waits behind them.
  REQUIRE(f.receiver.OnLongStart(kSenderProcess, f.Start(1, 2000)).ok());
  REQUIRE(f.receiver.OnLongStart(kSenderProcess, f.Start(2, 500)).ok());
  CHECK(f.receiver.Housekeeping(Clock::now()));  // starts wait
  CHECK(f.SentSeqs(wire::FrameKind::kGrant) == Seqs{0});

  // Message 0 arrives, is received and freed: its memory goes to the next.
  REQUIRE(f.Arrive(0, 2000, 0, 'a').ok());
  REQUIRE(f.Arrive(0, 2000, 1, 'b').ok());
  {
    auto got = f.TryReceive();
    REQUIRE(got.ok());
    CHECK(Fixture::Text(*got) == std::string(1000, 'a') + std::string(1000, 'b'));
  }
  CHECK(f.woken.load() >= 1);  // the freed memory asks the poller to grant
  CHECK(f.receiver.reassembly_used() == 0);
  f.receiver.Housekeeping(Clock::now());
  CHECK(f.SentSeqs(wire::FrameKind::kGrant) == Seqs{0, 1, 2});
  CHECK(f.receiver.reassembly_used() == 2500);
}

TEST_CASE("a fragment of no message being received is acknowledged, dropped and counted",
          "[long]") {
  Fixture f;
  REQUIRE(f.Arrive(9, 5000, 2, 'x').ok());
  CHECK(f.receiver.fragments_dropped() == 1);
  f.receiver.FlushAcks();
  REQUIRE(f.sent.size() == 1);
  const Sent& ack = f.sent.front();
  CHECK(ack.header.kind == wire::FrameKind::kAck);
  CHECK(ack.network == kNetwork);  // over the network it came by
  CHECK(ack.header.seq == 9);
  CHECK(ack.header.offset == 2000);
  CHECK(ack.header.total == 1000);  // the bytes acknowledged
  CHECK(f.TryReceive().status().code() == StatusCode::kTryAgain);
}

TEST_CASE("a fragment that does not fit its message is the sender's error", "[long]") {
  Fixture f;
  REQUIRE(f.receiver.OnLongStart(kSenderProcess, f.Start(0, 2000)).ok());
  buffers::SlotRef odd = f.Fragment(0, 2000, 0, 'a');
  odd->header().offset = 500;  // not at a fragment's start
  Status status = f.receiver.OnFragment(kNetwork, kSenderProcess, std::move(odd));
  CHECK(status.code() == StatusCode::kInvalidArgument);
  // From another process than the start's.
  status = f.receiver.OnFragment(kNetwork, Gid::Process(3, 1), f.Fragment(0, 2000, 0, 'a'));
  CHECK(status.code() == StatusCode::kInvalidArgument);
}

TEST_CASE(
    "a duplicate fragment is acknowledged but neither placed again nor counted toward "
    "completion",
    "[long]") {
  Fixture f;
  REQUIRE(f.receiver.OnLongStart(kSenderProcess, f.Start(0, 2000)).ok());
  REQUIRE(f.Arrive(0, 2000, 0, 'a').ok());
  REQUIRE(f.Arrive(0, 2000, 0, 'z').ok());  // sent again after its network was thought dead
  CHECK(f.receiver.fragments_dropped() == 1);
  CHECK(f.TryReceive().status().code() == StatusCode::kTryAgain);  // still arriving
  f.receiver.FlushAcks();
  CHECK(f.SentSeqs(wire::FrameKind::kAck) == Seqs{0, 0});

  REQUIRE(f.Arrive(0, 2000, 1, 'b').ok());
  auto got = f.TryReceive();
  REQUIRE(got.ok());
  CHECK(Fixture::Text(*got) == std::string(1000, 'a') + std::string(1000, 'b'));
}

TEST_CASE("acknowledgements wait for the end of the round, one for fragments that came in a row",
          "[long]") {
  Fixture f;
  REQUIRE(f.receiver.OnLongStart(kSenderProcess, f.Start(0, 4000)).ok());
  f.sent.clear();
  REQUIRE(f.Arrive(0, 4000, 0, 'a').ok());
  REQUIRE(f.Arrive(0, 4000, 1, 'b').ok());
  REQUIRE(f.Arrive(0, 4000, 3, 'd').ok());
  CHECK(f.sent.empty());
  CHECK(f.noted.load() == 3);  // the poller is asked for its housekeeping
  f.receiver.Housekeeping(Clock::now());
  REQUIRE(f.sent.size() == 2);
  CHECK(f.sent[0].header.offset == 0);
  CHECK(f.sent[0].header.total == 2000);
  CHECK(f.sent[1].header.offset == 3000);
  CHECK(f.sent[1].header.total == 1000);
  // The last fragment's acknowledgement leaves at once, before the
  // message is handed over.
  REQUIRE(f.Arrive(0, 4000, 2, 'c').ok());
  REQUIRE(f.sent.size() == 3);
  CHECK(f.sent[2].header.offset == 2000);
  CHECK(f.TryReceive().ok());
}

TEST_CASE(
    "a partial message whose sender went silent is discarded after partial_timeout and its "
    "late fragments are answered with an abort",
    "[long]") {
  Fixture f({.reassembly_cap = 1 << 20,
             .partial_timeout = 200ms,
             .fragment_timeout = 10s,
             .partial_check_period = 1ms});
  REQUIRE(f.receiver.OnLongStart(kSenderProcess, f.Start(0, 2000)).ok());
  const auto arrived = Clock::now();
  REQUIRE(f.Arrive(0, 2000, 0, 'a').ok());
  CHECK(f.receiver.Housekeeping(arrived));
  CHECK(f.SentSeqs(wire::FrameKind::kAbort).empty());  // not before its time
  CHECK(f.receiver.reassembly_used() == 2000);

  CHECK_FALSE(f.receiver.Housekeeping(Clock::now() + 300ms));  // nothing left
  REQUIRE(f.SentSeqs(wire::FrameKind::kAbort) == Seqs{0});
  const Sent& abort = f.sent.back();
  CHECK(abort.process == kSenderProcess);
  CHECK(abort.header.tag == kAbortByReceiver);
  CHECK(f.receiver.reassembly_used() == 0);  // its memory is freed
  CHECK(f.TryReceive().status().code() == StatusCode::kTryAgain);

  const uint64_t dropped = f.receiver.fragments_dropped();
  REQUIRE(f.Arrive(0, 2000, 1, 'b').ok());
  CHECK(f.receiver.fragments_dropped() == dropped + 1);
  CHECK(f.SentSeqs(wire::FrameKind::kAbort) == Seqs{0, 0});
  CHECK(f.sent.back().network == kNetwork);  // over the network it came by
  f.receiver.FlushAcks();
  CHECK(f.SentSeqs(wire::FrameKind::kAck).size() == 1);  // only the first fragment's
}

TEST_CASE("a grant that brings no fragment is sent again after fragment_timeout", "[long]") {
  Fixture f({.reassembly_cap = 1 << 20,
             .partial_timeout = 10s,
             .fragment_timeout = 100ms,
             .partial_check_period = 1ms});
  const auto started = Clock::now();
  REQUIRE(f.receiver.OnLongStart(kSenderProcess, f.Start(0, 2000)).ok());
  f.receiver.Housekeeping(started);
  CHECK(f.SentSeqs(wire::FrameKind::kGrant) == Seqs{0});
  f.receiver.Housekeeping(Clock::now() + 150ms);
  CHECK(f.SentSeqs(wire::FrameKind::kGrant) == Seqs{0, 0});
}

TEST_CASE(
    "a sender's abort discards its message, or skips it in the pair's order before its "
    "start",
    "[long]") {
  Fixture f;
  REQUIRE(f.receiver.OnLongStart(kSenderProcess, f.Start(0, 2000)).ok());
  REQUIRE(f.Arrive(0, 2000, 0, 'a').ok());
  REQUIRE(f.FromSender(wire::FrameKind::kAbort, kAbortBySender, 0).ok());
  CHECK(f.skipped.empty());
  CHECK(f.receiver.reassembly_used() == 0);
  CHECK(f.TryReceive().status().code() == StatusCode::kTryAgain);
  // Not started yet: the pair's order stops waiting for it.
  REQUIRE(f.FromSender(wire::FrameKind::kAbort, kAbortBySender, 1).ok());
  REQUIRE(f.skipped.size() == 1);
  CHECK(f.skipped.front() == LongKey{kSender.raw(), kMe.raw(), 1});
}

TEST_CASE("a probe is answered by what became of the start", "[long]") {
  Fixture f({.reassembly_cap = 1500});
  REQUIRE(f.receiver.OnLongStart(kSenderProcess, f.Start(0, 1000)).ok());
  REQUIRE(f.receiver.OnLongStart(kSenderProcess, f.Start(1, 1000)).ok());  // waits for memory
  f.sent.clear();
  REQUIRE(f.FromSender(wire::FrameKind::kProbe, kProbeAsk, 0).ok());
  REQUIRE(f.FromSender(wire::FrameKind::kProbe, kProbeAsk, 1).ok());
  REQUIRE(f.FromSender(wire::FrameKind::kProbe, kProbeAsk, 7).ok());  // never seen: no answer
  REQUIRE(f.sent.size() == 2);
  CHECK(f.sent[0].header.kind == wire::FrameKind::kGrant);  // the grant was lost
  CHECK(f.sent[1].header.kind == wire::FrameKind::kProbe);  // waiting for memory
  CHECK(f.sent[1].header.tag == kProbeWaiting);
  CHECK(f.sent[1].network == kNetwork);  // over the network the probe came by
}

TEST_CASE(
    "a RecvInto bound to a long message that gives up unbinds: what came moves to library "
    "memory and the message stays queued",
    "[long]") {
  Fixture f({.reassembly_cap = 0});  // no library memory: only the RecvInto can take it
  std::vector<std::byte> out(2000);
  f.network.Then([&] { REQUIRE(f.receiver.OnLongStart(kSenderProcess, f.Start(0, 2000)).ok()); });
  f.network.Then([&] { REQUIRE(f.Arrive(0, 2000, 0, 'a').ok()); });
  auto got = f.receive.ReceiveInto(kMe, Selector{}, out, Clock::now() + 200ms);
  CHECK(got.status().code() == StatusCode::kDeadlineExceeded);
  CHECK(f.SentSeqs(wire::FrameKind::kGrant) == Seqs{0});  // granted into `out`
  CHECK(static_cast<char>(out[0]) == 'a');
  CHECK(f.receiver.reassembly_used() == 2000);  // moved, past the cap: it was granted

  REQUIRE(f.Arrive(0, 2000, 1, 'b').ok());
  auto later = f.TryReceive();
  REQUIRE(later.ok());
  CHECK(Fixture::Text(*later) == std::string(1000, 'a') + std::string(1000, 'b'));
}

TEST_CASE("a RecvInto that waits gets a long message landing in its buffer", "[long]") {
  Fixture f({.reassembly_cap = 0});
  std::vector<std::byte> out(3000);
  f.network.Then([&] {
    REQUIRE(f.receiver.OnLongStart(kSenderProcess, f.Start(0, 2000)).ok());
    REQUIRE(f.Arrive(0, 2000, 1, 'b').ok());
    REQUIRE(f.Arrive(0, 2000, 0, 'a').ok());
  });
  auto got = f.receive.ReceiveInto(kMe, Selector{}, out, Clock::now() + 5s);
  REQUIRE(got.ok());
  CHECK(got->size == 2000);
  CHECK(got->source == kSender);
  CHECK(std::string(reinterpret_cast<const char*>(out.data()), 2000) ==
        std::string(1000, 'a') + std::string(1000, 'b'));
  CHECK(f.receiver.reassembly_used() == 0);
}

// A packed piece never gets library memory: a reader's receive too small
// for it would leave both sides waiting for ever.
TEST_CASE("a packed piece larger than its reader's receive fails it and tells the sender",
          "[long][packed]") {
  Fixture f({.reassembly_cap = 1 << 20});
  Selector pieces{kSender, TagMatch(kTag)};
  pieces.pieces = true;
  auto piece_start = [&](uint64_t seq) {
    buffers::SlotRef start = f.Start(seq, 2000);
    start->header().flags = wire::kFlagPackedPiece;
    return start;
  };
  std::vector<std::byte> out(1000);
  SECTION("the receive is posted before the start") {
    f.network.Then([&] { REQUIRE(f.receiver.OnLongStart(kSenderProcess, piece_start(0)).ok()); });
  }
  SECTION("the start waits, then the receive is posted") {
    REQUIRE(f.receiver.OnLongStart(kSenderProcess, piece_start(0)).ok());
    CHECK(f.sent.empty());  // no library memory for a piece
    // The periodic round is spent now (the next is partial_check_period
    // away), so only the posted receive's ask can have the piece granted.
    CHECK_FALSE(f.receiver.Housekeeping(Clock::now()));
    CHECK(f.sent.empty());
    // The posted receive asks for housekeeping; the poll round runs it.
    f.network.Then([&] { f.receiver.Housekeeping(Clock::now()); });
  }
  auto got = f.receive.ReceiveInto(kMe, pieces, out, Clock::now() + 5s);
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == StatusCode::kInvalidArgument);
  INFO(got.status().message());
  CHECK(got.status().message().find("a 2000 byte packed piece") != std::string::npos);
  CHECK(f.SentSeqs(wire::FrameKind::kGrant).empty());
  CHECK(f.SentSeqs(wire::FrameKind::kAbort) == Seqs{0});
  CHECK(f.receiver.reassembly_used() == 0);
}

TEST_CASE(
    "a packed piece waiting for its reader's receive holds no other start back and keeps the "
    "poller idle",
    "[long][packed]") {
  Fixture f({.reassembly_cap = 1 << 20});
  buffers::SlotRef piece = f.Start(0, 2000);
  piece->header().flags = wire::kFlagPackedPiece;
  REQUIRE(f.receiver.OnLongStart(kSenderProcess, std::move(piece)).ok());
  CHECK(f.sent.empty());                               // no library memory for a piece
  CHECK_FALSE(f.receiver.Housekeeping(Clock::now()));  // nothing for the poller to do
  // A plain start behind it gets library memory at once.
  REQUIRE(f.receiver.OnLongStart(kSenderProcess, f.Start(1, 500)).ok());
  CHECK(f.SentSeqs(wire::FrameKind::kGrant) == Seqs{1});
  CHECK(f.receiver.reassembly_used() == 500);
}

TEST_CASE("a start for a thread that left is answered with an abort", "[long]") {
  Fixture f;
  REQUIRE(f.receive.Leave(kMe));
  REQUIRE(f.receiver.OnLongStart(kSenderProcess, f.Start(0, 2000)).ok());
  REQUIRE(f.SentSeqs(wire::FrameKind::kAbort) == Seqs{0});
  CHECK(f.sent.front().header.tag == kAbortByReceiver);
  CHECK(f.receiver.reassembly_used() == 0);
}

TEST_CASE("a waiting start whose thread left is given up and its sender told", "[long]") {
  Fixture f({.reassembly_cap = 1000});
  REQUIRE(f.receiver.OnLongStart(kSenderProcess, f.Start(0, 2000)).ok());  // over the cap: waits
  CHECK(f.sent.empty());
  REQUIRE(f.receive.Leave(kMe));
  CHECK_FALSE(f.receiver.Housekeeping(Clock::now()));
  CHECK(f.SentSeqs(wire::FrameKind::kAbort) == Seqs{0});
}

TEST_CASE("a sending process that exits takes its messages being received with it", "[long]") {
  Fixture f;
  REQUIRE(f.receiver.OnLongStart(kSenderProcess, f.Start(0, 2000)).ok());
  REQUIRE(f.Arrive(0, 2000, 0, 'a').ok());
  f.receiver.SenderExited(kSenderProcess, "killed");
  CHECK(f.receiver.reassembly_used() == 0);
  CHECK(f.TryReceive().status().code() == StatusCode::kTryAgain);
  CHECK_FALSE(f.receiver.Housekeeping(Clock::now()));
}

TEST_CASE("a long message within the process is delivered whole in library memory", "[long]") {
  Fixture f;
  const std::string text(5000, 'q');
  const Gid local_sender = Gid::Thread(kProcess, 2);
  REQUIRE(
      f.receiver.DeliverInProcess(local_sender, kMe, kTag, std::as_bytes(std::span(text))).ok());
  CHECK(f.receiver.reassembly_used() == 5000);
  {
    auto got = f.TryReceive();
    REQUIRE(got.ok());
    CHECK(Fixture::Text(*got) == text);
    CHECK(got->source() == local_sender);
  }
  CHECK(f.receiver.reassembly_used() == 0);
}

// --- multicast fills (wire/frame.h: markers and fills) ---

constexpr Gid kRelayProcess = Gid::Process(3, 9);  // carries kSender's multicasts
constexpr Gid kStranger = Gid::Process(4, 2);

buffers::SlotRef Flagged(buffers::SlotRef slot) {
  slot->header().flags = wire::kFlagRelayed;
  return slot;
}

TEST_CASE("an abort of a long message from a process that does not carry it is ignored",
          "[long][multicast]") {
  Fixture f;
  REQUIRE(f.receiver.OnLongStart(kSenderProcess, f.Start(0, 2000)).ok());
  // A third process names the sender (a relayed frame may): no effect.
  REQUIRE(
      f.receiver
          .OnControl(kNetwork, kStranger,
                     wire::ControlHeader(wire::FrameKind::kAbort, kSender, kMe, 0, kAbortBySender))
          .ok());
  REQUIRE(f.Arrive(0, 2000, 0, 'a').ok());
  REQUIRE(f.Arrive(0, 2000, 1, 'b').ok());
  auto got = f.TryReceive();
  REQUIRE(got.ok());
  CHECK(got->size() == 2000);
}

TEST_CASE("a long fill whose relay dies midway is taken over by its sender, keeping what came",
          "[long][multicast]") {
  Fixture f;
  auto relay_fragment = [&](uint64_t index) {
    return f.receiver.OnFragment(kNetwork, kRelayProcess,
                                 Flagged(f.Fragment(0, 3000, index, char('a' + index))));
  };
  auto sender_fragment = [&](uint64_t index) {
    return f.receiver.OnFragment(kNetwork, kSenderProcess,
                                 Flagged(f.Fragment(0, 3000, index, char('a' + index))));
  };
  REQUIRE(f.receiver.OnLongStart(kRelayProcess, Flagged(f.Start(0, 3000))).ok());
  REQUIRE(f.sent.size() == 1);
  CHECK(f.sent.back().process == kRelayProcess);  // the grant goes to its carrier
  REQUIRE(relay_fragment(0).ok());
  f.receiver.SenderExited(kRelayProcess, "killed");
  CHECK_FALSE(f.TryReceive().ok());  // not failed: kept for the sender's own try
  // A late fragment of the dead relay is dropped, not an error.
  REQUIRE(relay_fragment(1).ok());
  f.sent.clear();
  REQUIRE(f.receiver.OnRefill(kSenderProcess, Flagged(f.Start(0, 3000))).ok());
  REQUIRE(f.SentSeqs(wire::FrameKind::kGrant) == Seqs{0});
  CHECK(f.sent.back().process == kSenderProcess);
  for (uint64_t index = 0; index < 3; ++index) REQUIRE(sender_fragment(index).ok());
  auto got = f.TryReceive();
  REQUIRE(got.ok());
  CHECK(Fixture::Text(*got) ==
        std::string(1000, 'a') + std::string(1000, 'b') + std::string(1000, 'c'));
  // Another try at it, the sender's or the relay's: "all here".
  f.sent.clear();
  REQUIRE(f.receiver.OnRefill(kSenderProcess, Flagged(f.Start(0, 3000))).ok());
  REQUIRE(f.receiver.OnRefill(kRelayProcess, Flagged(f.Start(0, 3000))).ok());
  REQUIRE(f.sent.size() == 2);
  for (const Sent& answer : f.sent) {
    CHECK(answer.header.kind == wire::FrameKind::kAck);
    CHECK(answer.header.offset == 0);
    CHECK(answer.header.total == 3000);
  }
  CHECK(f.sent[0].process == kSenderProcess);
  CHECK(f.sent[1].process == kRelayProcess);
  CHECK_FALSE(f.TryReceive().ok());  // once
}

TEST_CASE("a long fill its relay gives up before the grant starts anew from its sender",
          "[long][multicast]") {
  Fixture f({.reassembly_cap = 1000});  // 3000 bytes wait for memory
  REQUIRE(f.receiver.OnLongStart(kRelayProcess, Flagged(f.Start(0, 3000))).ok());
  CHECK(f.SentSeqs(wire::FrameKind::kGrant).empty());
  // The relay gives up (its abort, honoured: it carries it).
  wire::Header abort =
      wire::ControlHeader(wire::FrameKind::kAbort, kSender, kMe, 0, kAbortBySender);
  abort.flags = wire::kFlagRelayed;
  REQUIRE(f.receiver.OnControl(kNetwork, kRelayProcess, abort).ok());
  // The relay again: a second copy, dropped; the sender's: a new start,
  // waiting for memory like any.
  REQUIRE(f.receiver.OnRefill(kRelayProcess, Flagged(f.Start(0, 3000))).ok());
  REQUIRE(f.receiver.OnRefill(kSenderProcess, Flagged(f.Start(0, 3000))).ok());
  CHECK(f.SentSeqs(wire::FrameKind::kGrant).empty());
  CHECK(f.SentSeqs(wire::FrameKind::kAbort).empty());
  // A probe from the sender is answered (it is the sender's now).
  REQUIRE(f.FromSender(wire::FrameKind::kProbe, kProbeAsk, 0).ok());
  REQUIRE_FALSE(f.sent.empty());
  CHECK(f.sent.back().process == kSenderProcess);
  CHECK(f.sent.back().header.kind == wire::FrameKind::kProbe);
}

TEST_CASE(
    "a long fill for a thread that left is answered 'given up' on a second try, not 'all here'",
    "[long][multicast]") {
  Fixture f;
  const Gid gone = Gid::Thread(kProcess, 9);  // never enrolled here
  auto start = [&] {
    buffers::SlotRef slot = Flagged(f.Start(0, 3000));
    slot->header().destination = gone.raw();
    return slot;
  };
  REQUIRE(f.receiver.OnLongStart(kRelayProcess, start()).ok());
  REQUIRE(f.sent.size() == 1);
  CHECK(f.sent.back().header.kind == wire::FrameKind::kAbort);
  CHECK(f.sent.back().process == kRelayProcess);
  REQUIRE(f.receiver.OnRefill(kSenderProcess, start()).ok());
  REQUIRE(f.sent.size() == 2);
  CHECK(f.sent.back().header.kind == wire::FrameKind::kAbort);
  CHECK(f.sent.back().process == kSenderProcess);
}

TEST_CASE(
    "a late long fill for a number its pair's order gave up is answered 'given up', and so are "
    "its fragments",
    "[long][multicast]") {
  // Review 4 item 2: never "all here" for a message that was not delivered.
  Fixture f;
  REQUIRE(f.receiver.OnRefill(kSenderProcess, Flagged(f.Start(0, 3000)), /*given_up=*/true).ok());
  REQUIRE(f.sent.size() == 1);
  CHECK(f.sent.back().header.kind == wire::FrameKind::kAbort);
  CHECK(f.sent.back().process == kSenderProcess);
  CHECK(f.SentSeqs(wire::FrameKind::kGrant).empty());
  CHECK(f.receiver.reassembly_used() == 0);
  // Its fragment (sent before the abort came) is told the same.
  REQUIRE(
      f.receiver.OnFragment(kNetwork, kSenderProcess, Flagged(f.Fragment(0, 3000, 0, 'a'))).ok());
  REQUIRE(f.sent.size() == 2);
  CHECK(f.sent.back().header.kind == wire::FrameKind::kAbort);
  // The relay's, later: the same.
  REQUIRE(f.receiver.OnRefill(kRelayProcess, Flagged(f.Start(0, 3000)), /*given_up=*/true).ok());
  REQUIRE(f.sent.size() == 3);
  CHECK(f.sent.back().header.kind == wire::FrameKind::kAbort);
  CHECK(f.sent.back().process == kRelayProcess);
  CHECK_FALSE(f.TryReceive().ok());
}

}  // namespace
}  // namespace tocl::runtime
