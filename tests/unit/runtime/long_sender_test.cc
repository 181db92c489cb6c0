// The sending side of long messages without a daemon or networks: a real
// send queue over fake routes that record what they take, and a fake
// receiver that answers (grants, acknowledges, aborts, or stays silent)
// from the poll round the sending thread runs while it waits, as the
// runtime's poller hands answers to the sender.
#include "runtime/long_sender.h"

#include <fmt/format.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "buffers/buffer_pool.h"
#include "part_fixtures.h"
#include "runtime/epoll_reactor.h"
#include "runtime/progress_engine.h"
#include "runtime/receive_side.h"
#include "runtime/send_queue.h"
#include "subsystem/subsystem.h"
#include "wire/frame.h"

namespace tocl::runtime {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Catch::Contains;

constexpr Gid kProcess = Gid::Process(1, 7);
constexpr Gid kAlice = Gid::Thread(kProcess, 1);  // the sending thread
constexpr Gid kPeer = Gid::Process(2, 9);
constexpr Gid kBob = Gid::Thread(kPeer, 4);  // the receiving thread
constexpr uint64_t kFragment = 1000;
constexpr Tag kTag = 6;

// A frame a route took: its header, and its payload (fragments).
struct Taken {
  wire::Header header;
  std::vector<std::byte> payload;
};

// A route that takes every frame, or is broken.
class FakeRoute final : public subsystem::Route {
 public:
  Status Post(detail::BufferSlot* slot) override {
    if (broken) return Unavailable("connection lost");
    taken.push_back(Taken{slot->header(), {}});
    slot->set_state(BufferState::kSent);
    slot->pool->Unref(slot);
    return Status::Ok();
  }
  Status PostCopy(const wire::Header& header, std::span<const std::byte> payload) override {
    if (broken) return Unavailable("connection lost");
    taken.push_back(Taken{header, {payload.begin(), payload.end()}});
    return Status::Ok();
  }
  bool Drained() const override { return true; }
  bool Broken() const override { return broken; }

  bool broken = false;
  std::vector<Taken> taken;
};

// The receiving process, as the sender hears it: a poll round (on the
// sending thread, the only one that polls here) answers what the routes
// took since the last round.
struct FakeReceiver {
  enum class AtStart { kGrant, kAbort, kSilent };
  AtStart at_start = AtStart::kGrant;
  std::set<size_t> silent_routes;  // their fragments arrive, unacknowledged
  std::function<void()> each_round;

  std::vector<size_t> seen;  // frames already answered, per route
  std::vector<bool> have;    // fragments that arrived, by index
  std::vector<std::byte> message;
  std::vector<size_t> probes;     // per route
  std::vector<size_t> fragments;  // per route
  std::vector<wire::Header> aborts;
};

// A network whose poll round is the test's (`round`).
class AnsweringNetwork final : public FakeSubsystem {
 public:
  AnsweringNetwork(buffers::BufferPool& pool, std::function<int()> round)
      : FakeSubsystem(pool), round_(std::move(round)) {}
  int Poll() override { return round_(); }

 private:
  const std::function<int()> round_;
};

struct Fixture : PoolAndPoller, SendQueue::Events, LongSender::Events {
  explicit Fixture(LongSender::Limits limits = {})
      : receive(size_t{1} << 20, 50us, shutting_down,
                ReceiveSide::Hooks{
                    .wake_poller = [] {},
                    .receive_posted = [] {},
                    .unbind_posted = [](PostedReceive&) { return true; },
                }),
        queue(kPeer, 64, *this),
        sender(limits, receive, shutting_down, *this) {
    receive.SetProcess(kProcess);
    receive.AttachProgress(progress);
    progress.AddSubsystem(&network);
    receive.AddThread(kAlice);
    sender.SetFragmentBytes(kFragment);
  }

  // Routes over networks 0, 1, ...: the first is the default.
  void AddRoutes(size_t count) {
    for (size_t i = 0; i < count; ++i) {
      auto route = std::make_unique<FakeRoute>();
      routes.push_back(route.get());
      queue.AddRoute(static_cast<int>(i), std::move(route), pool);
    }
    queue.Ready();
    peer.seen.assign(count, 0);
    peer.probes.assign(count, 0);
    peer.fragments.assign(count, 0);
  }
  Status Send(std::span<const std::byte> payload) {
    peer.have.assign((payload.size() + kFragment - 1) / kFragment, false);
    peer.message.assign(payload.size(), std::byte{0});
    return sender.Send(queue, kAlice, kBob, kTag, payload);
  }
  // The receiver's control frame about the message with sequence `seq`.
  void Answer(wire::FrameKind kind, uint64_t seq, Tag tag = 0, uint64_t offset = 0,
              uint64_t length = 0) {
    sender.OnControl(kPeer, wire::ControlHeader(kind, kBob, kAlice, seq, tag, offset, length));
  }
  void AnswerFrame(size_t route, const Taken& frame) {
    const wire::Header& header = frame.header;
    switch (header.kind) {
      case wire::FrameKind::kLongStart:
        if (peer.at_start == FakeReceiver::AtStart::kGrant) {
          Answer(wire::FrameKind::kGrant, header.seq);
        } else if (peer.at_start == FakeReceiver::AtStart::kAbort) {
          Answer(wire::FrameKind::kAbort, header.seq, kAbortByReceiver);
        }
        break;
      case wire::FrameKind::kFragment:
        ++peer.fragments[route];
        std::memcpy(peer.message.data() + header.offset, frame.payload.data(), header.length);
        peer.have[header.offset / kFragment] = true;
        if (peer.silent_routes.count(route) == 0) {
          Answer(wire::FrameKind::kAck, header.seq, 0, header.offset, header.length);
        }
        break;
      case wire::FrameKind::kProbe:
        ++peer.probes[route];
        break;
      case wire::FrameKind::kAbort:
        peer.aborts.push_back(header);
        break;
      default:
        break;
    }
  }

  // The poll round: the receiver answers.
  int Round() {
    int events = 0;
    for (size_t route = 0; route < routes.size(); ++route) {
      for (; peer.seen[route] < routes[route]->taken.size(); ++peer.seen[route], ++events) {
        AnswerFrame(route, routes[route]->taken[peer.seen[route]]);
      }
    }
    if (peer.each_round) peer.each_round();
    return events;
  }
  // --- SendQueue::Events ---
  void Queued(SendQueue&, bool) override { ++queued; }
  void Rerouted(const SendQueue&, int, int) override {}
  void AwaitProgress() override {}

  // --- LongSender::Events ---
  Status ResolveLocked(SendQueue& resolved, std::unique_lock<std::mutex>&) override {
    CHECK(&resolved == &queue);
    return resolve;
  }
  std::string NetworkName(int index) const override {
    return fmt::format("net{} (dev{})", index, index);
  }
  void NetworkFailed(int index) override { failed_networks.push_back(index); }
  void ListenForBells(bool on) override {
    listening += on ? 1 : -1;
    if (on) ++listened;
  }

  std::atomic<bool> shutting_down{false};
  ReceiveSide receive;
  AnsweringNetwork network{pool, [this] { return Round(); }};
  std::vector<FakeRoute*> routes;
  FakeReceiver peer;
  Status resolve;
  int queued = 0;
  std::vector<int> failed_networks;
  int listening = 0;
  int listened = 0;
  SendQueue queue;
  LongSender sender;
};

// `bytes` bytes that differ from fragment to fragment.
std::vector<std::byte> Pattern(size_t bytes) {
  std::vector<std::byte> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = std::byte(static_cast<uint8_t>(i * 7 + i / 1000));
  return data;
}

// Every frame of `kind` the routes took.
std::vector<wire::Header> TakenOf(const Fixture& f, wire::FrameKind kind) {
  std::vector<wire::Header> out;
  for (const FakeRoute* route : f.routes) {
    for (const Taken& frame : route->taken) {
      if (frame.header.kind == kind) out.push_back(frame.header);
    }
  }
  return out;
}

TEST_CASE(
    "a long send completes once every fragment is acknowledged, spread over the peer's "
    "networks",
    "[long]") {
  Fixture f;
  f.AddRoutes(2);
  const std::vector<std::byte> data = Pattern(5500);
  REQUIRE(f.Send(data).ok());
  // The start first, on the default route, announcing the fragment size.
  REQUIRE_FALSE(f.routes[0]->taken.empty());
  const wire::Header& start = f.routes[0]->taken.front().header;
  CHECK(start.kind == wire::FrameKind::kLongStart);
  CHECK(start.total == data.size());
  CHECK(start.reserved == kFragment);
  CHECK(start.tag == kTag);
  // Every fragment once, the message whole, both networks used.
  CHECK(f.peer.have == std::vector<bool>(6, true));
  CHECK(f.peer.message == data);
  CHECK(f.peer.fragments[0] + f.peer.fragments[1] == 6);
  CHECK(f.peer.fragments[0] > 0);
  CHECK(f.peer.fragments[1] > 0);
  CHECK(f.failed_networks.empty());
  CHECK(TakenOf(f, wire::FrameKind::kAbort).empty());
  // The poller heard bells while the sender waited, and stops after.
  CHECK(f.listened == 1);
  CHECK(f.listening == 0);
  // A late acknowledgement finds no message and changes nothing: nothing
  // is sent, no network is blamed.
  const size_t taken0 = f.routes[0]->taken.size();
  const size_t taken1 = f.routes[1]->taken.size();
  f.Answer(wire::FrameKind::kAck, start.seq, 0, 0, kFragment);
  CHECK(f.routes[0]->taken.size() == taken0);
  CHECK(f.routes[1]->taken.size() == taken1);
  CHECK(f.failed_networks.empty());
}

TEST_CASE("a receiver's abort fails the send with a status that says so", "[long]") {
  Fixture f;
  f.AddRoutes(1);
  f.peer.at_start = FakeReceiver::AtStart::kAbort;
  const std::vector<std::byte> data = Pattern(3000);
  Status status = f.Send(data);
  CHECK(status.code() == StatusCode::kUnavailable);
  CHECK_THAT(status.message(), Contains("gave up the message"));
  CHECK(f.peer.fragments[0] == 0);
  // The sender tells the receiver it gave up too (best effort).
  const auto aborts = TakenOf(f, wire::FrameKind::kAbort);
  REQUIRE(aborts.size() == 1);
  CHECK(aborts.front().tag == kAbortBySender);
  CHECK(aborts.front().source == kAlice.raw());
  CHECK(aborts.front().destination == kBob.raw());
}

TEST_CASE(
    "a send that hears nothing probes over each network in turn and fails after "
    "partial_timeout",
    "[long]") {
  Fixture f({.fragment_timeout = 10ms, .partial_timeout = 100ms});
  f.AddRoutes(2);
  f.peer.at_start = FakeReceiver::AtStart::kSilent;
  const std::vector<std::byte> data = Pattern(3000);
  const auto started = Clock::now();
  Status status = f.Send(data);
  const auto took = Clock::now() - started;
  CHECK(status.code() == StatusCode::kUnavailable);
  CHECK_THAT(status.message(), Contains("answered nothing"));
  CHECK(took >= 100ms);
  CHECK(took < 5s);
  CHECK(f.peer.probes[0] >= 1);
  CHECK(f.peer.probes[1] >= 1);
  CHECK(f.peer.fragments[0] + f.peer.fragments[1] == 0);  // never granted
  CHECK(TakenOf(f, wire::FrameKind::kAbort).size() == 1);
}

TEST_CASE(
    "a receiver that says it waits for memory keeps its sender waiting past "
    "partial_timeout",
    "[long]") {
  Fixture f({.fragment_timeout = 10ms, .partial_timeout = 150ms});
  f.AddRoutes(1);
  f.peer.at_start = FakeReceiver::AtStart::kSilent;
  const auto started = Clock::now();
  size_t answered = 0;
  f.peer.each_round = [&] {
    // Answers each probe with "waiting"; grants after 2.5 partial_timeouts.
    const std::vector<wire::Header> probes = TakenOf(f, wire::FrameKind::kProbe);
    for (; answered < probes.size(); ++answered) {
      f.Answer(wire::FrameKind::kProbe, probes[answered].seq, kProbeWaiting);
    }
    if (Clock::now() - started > 375ms) {
      f.Answer(wire::FrameKind::kGrant, TakenOf(f, wire::FrameKind::kLongStart).front().seq);
    }
  };
  const std::vector<std::byte> data = Pattern(2500);
  REQUIRE(f.Send(data).ok());
  // It kept probing past partial_timeout (each probe answered "waiting").
  CHECK(answered >= 2);
  CHECK(f.peer.message == data);
}

TEST_CASE("a network that acknowledges nothing is failed and its fragments go over the other",
          "[long]") {
  Fixture f({.fragment_timeout = 50ms, .partial_timeout = 5s});
  f.AddRoutes(2);
  f.peer.silent_routes = {1};
  const std::vector<std::byte> data = Pattern(20000);
  REQUIRE(f.Send(data).ok());
  CHECK(f.failed_networks == std::vector<int>{1});
  CHECK(f.queue.health()[1].failed);
  CHECK(f.queue.rails()[0].fragments_resent > 0);  // what network 1 had
  CHECK(f.peer.message == data);
}

TEST_CASE("a broken route fails its network and the message goes over the other", "[long]") {
  Fixture f;
  f.AddRoutes(2);
  f.routes[1]->broken = true;
  const std::vector<std::byte> data = Pattern(8000);
  REQUIRE(f.Send(data).ok());
  CHECK(f.failed_networks == std::vector<int>{1});
  CHECK(f.queue.health()[1].broken);
  CHECK(f.peer.fragments[1] == 0);
  CHECK(f.peer.message == data);
}

TEST_CASE("with every network broken the send fails, naming the networks", "[long]") {
  Fixture f({.fragment_timeout = 20ms, .partial_timeout = 5s});
  f.AddRoutes(2);
  f.peer.silent_routes = {0, 1};
  // Once fragments are out (the start went), both routes break for good.
  f.peer.each_round = [&] {
    if (f.peer.fragments[0] + f.peer.fragments[1] > 0) {
      f.routes[0]->broken = true;
      f.routes[1]->broken = true;
    }
  };
  const std::vector<std::byte> data = Pattern(4000);
  Status status = f.Send(data);
  CHECK(status.code() == StatusCode::kUnavailable);
  CHECK_THAT(status.message(), Contains("no network reaches"));
  CHECK_THAT(status.message(), Contains("net0 (dev0), net1 (dev1) broken"));
  CHECK(f.failed_networks.size() == 2);
}

TEST_CASE(
    "with every network silent the send waits for them, trying them again, until "
    "partial_timeout",
    "[long]") {
  // Silent is not broken: a route that connects again sends what it held.
  Fixture f({.fragment_timeout = 20ms, .partial_timeout = 300ms});
  f.AddRoutes(2);
  f.peer.silent_routes = {0, 1};
  const std::vector<std::byte> data = Pattern(4000);
  const auto start = std::chrono::steady_clock::now();
  Status status = f.Send(data);
  CHECK(std::chrono::steady_clock::now() - start >= 250ms);
  CHECK(status.code() == StatusCode::kUnavailable);
  CHECK_THAT(status.message(), Contains("partial_timeout"));
  CHECK(f.failed_networks.size() >= 2);
  CHECK(f.queue.rails()[0].fragments_resent + f.queue.rails()[1].fragments_resent > 0);
}

TEST_CASE("a send whose peer cannot be resolved fails before its start", "[long]") {
  Fixture f;
  f.AddRoutes(1);
  f.resolve = NotFound("no process h2.p9");
  const std::vector<std::byte> data = Pattern(3000);
  CHECK(f.Send(data).code() == StatusCode::kNotFound);
  CHECK(f.routes[0]->taken.empty());
}

TEST_CASE("shutting down ends a long send that waits", "[long]") {
  Fixture f({.fragment_timeout = 10ms, .partial_timeout = 10s});
  f.AddRoutes(1);
  f.peer.at_start = FakeReceiver::AtStart::kSilent;
  f.peer.each_round = [&] {
    if (f.peer.probes[0] > 0) f.shutting_down.store(true);
  };
  const std::vector<std::byte> data = Pattern(3000);
  Status status = f.Send(data);
  CHECK(status.code() == StatusCode::kUnavailable);
  CHECK_THAT(status.message(), Contains("shutting down"));
}

}  // namespace
}  // namespace tocl::runtime
