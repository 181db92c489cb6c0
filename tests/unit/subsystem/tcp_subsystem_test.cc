// The tcp subsystem between two instances in one process, each with its own
// EpollReactor and a sink that collects what arrives; plus raw sockets that
// speak the wire format badly.
#include "subsystem/tcp/tcp_subsystem.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "buffers/buffer_pool.h"
#include "buffers/buffer_slot.h"
#include "buffers/size_class.h"
#include "collecting_sink.h"
#include "raw_handshake.h"
#include "runtime/epoll_reactor.h"
#include "subsystem/tcp/socket.h"
#include "subsystem_harness.h"
#include "wire/frame.h"

namespace tocl::subsystem::tcp {
namespace {

using namespace std::chrono_literals;
using testing::Arrival;
using testing::Clock;
using testing::ClosedByPeer;
using testing::CollectingSink;
using testing::KillSockets;
using testing::LogCapture;
using testing::NewFrame;
using testing::Polled;
using testing::PostPumping;
using testing::PostRetrying;
using testing::Pump;
using testing::PumpRounds;
using testing::PumpThread;
using testing::PumpUntil;
using testing::RawConnect;
using testing::RawWrite;
using testing::Sides;

constexpr Gid kA = Gid::Process(1, 1);
constexpr Gid kB = Gid::Process(1, 2);
constexpr uint32_t kClasses = 9;  // 256 B .. 64 KiB

TcpOptions Options(Gid self, uint32_t classes = kClasses) {
  TcpOptions options;
  options.self_process = self;
  options.num_classes = classes;
  return options;
}

// One process's worth: a reactor, a sink, a tcp subsystem. The test thread
// (or a PumpThread) is its polling thread.
struct Side final : Polled {
  explicit Side(const TcpOptions& options, size_t budget_bytes = size_t{256} << 20)
      : budget(budget_bytes) {
    auto created = runtime::EpollReactor::Create();
    REQUIRE(created.ok());
    reactor = std::move(*created);
    auto opened = TcpSubsystem::Open(options, *reactor, sink, budget);
    INFO(opened.status().ToString());
    REQUIRE(opened.ok());
    tcp = std::move(*opened);
  }
  ~Side() override {
    sink.ReleaseKept();
    tcp->Close();
  }
  Side(const Side&) = delete;
  Side& operator=(const Side&) = delete;

  bool PumpOnce() override {
    const int handled = reactor->Wait(0);
    return tcp->Poll() + handled > 0;
  }
  uint64_t PoolInUse() const { return testing::PoolInUse(tcp->pool()); }

  buffers::PoolBudget budget;
  std::unique_ptr<runtime::EpollReactor> reactor;
  CollectingSink sink;
  std::unique_ptr<TcpSubsystem> tcp;  // last: closed and destroyed first
};

// Checks that `arrivals` are frames first_seq, first_seq+1, ... from kA to
// kB, whole.
void CheckInOrder(const std::vector<Arrival>& arrivals, uint64_t first_seq = 0) {
  for (size_t i = 0; i < arrivals.size(); ++i) {
    const Arrival& arrival = arrivals[i];
    INFO("arrival " << i << " seq " << arrival.header.seq);
    REQUIRE(arrival.header.seq == first_seq + i);
    REQUIRE(arrival.from == kA);
    REQUIRE(Gid::FromRaw(arrival.header.source).process() == kA);
    REQUIRE(Gid::FromRaw(arrival.header.destination) == Gid::Thread(kB, 1));
    REQUIRE(arrival.intact);
  }
}

std::vector<std::byte> Encode(const wire::Header& header, size_t payload_bytes = 0) {
  std::vector<std::byte> bytes(wire::kHeaderBytes + payload_bytes);
  wire::EncodeHeader(header, bytes.data());
  return bytes;
}

wire::Header Handshake(wire::FrameKind kind, Gid from, Gid to) {
  wire::Header header;
  header.kind = kind;
  header.length = wire::HandshakePayloadBytes(kind);
  header.source = from.raw();
  header.destination = to.raw();
  return header;
}

// A hello frame with a fresh nonce (a valid first frame).
std::vector<std::byte> HelloBytes(Gid from, Gid to) {
  return Encode(Handshake(wire::FrameKind::kHello, from, to), wire::kHandshakeNonceBytes);
}

// A raw client's handshake as `from` to `to` with `key`, pumping `sides`
// for the answer. Returns the connection ready for frames, and whether the
// acceptor proved it holds `key` (`acceptor_ok`; a proof of zeros is sent
// when it did not).
Fd RawHandshake(const std::string& address, Gid from, Gid to, const security::ClusterKey& key,
                const Sides& sides, bool* acceptor_ok = nullptr) {
  Fd raw = RawConnect(address);
  ::tocl::testing::RawConnector connector(from, to, key);
  RawWrite(raw, connector.Hello());
  std::vector<std::byte> answer = RawRead(raw, ::tocl::testing::RawConnector::kAnswerBytes, sides);
  bool proved = false;
  auto proof = connector.Proof(answer, &proved);
  if (acceptor_ok != nullptr) *acceptor_ok = proved;
  REQUIRE(proof.ok());
  RawWrite(raw, *proof);
  if (proved) {
    // The acceptor's answer to our resume: stream 1 goes on from frame 0.
    const std::vector<std::byte> resumed = RawRead(raw, wire::kHeaderBytes, sides);
    wire::Header header;
    std::memcpy(&header, resumed.data(), sizeof(header));
    REQUIRE(header.kind == wire::FrameKind::kReceived);
    REQUIRE(header.seq == ::tocl::testing::RawConnector::kStream);
    REQUIRE(header.offset == 0);
  }
  return raw;
}

wire::Header Message(Gid source, Gid destination, uint32_t length) {
  wire::Header header;
  header.source = source.raw();
  header.destination = destination.raw();
  header.length = length;
  header.total = length;
  return header;
}

uint16_t UnusedPort() {
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  auto address = SocketAddress::FromIp("127.0.0.1", 0);
  REQUIRE(bind(fd.get(), address->get(), address->length()) == 0);
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  REQUIRE(getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &length) == 0);
  return SocketAddress::FromSockaddr(bound, length).port();
}

TEST_CASE("a tcp subsystem publishes IP:PORT and checks the addresses it is given", "[tcp]") {
  Side a(Options(kA));
  const std::string& address = a.tcp->address();
  REQUIRE(address.starts_with("127.0.0.1:"));
  REQUIRE(SocketAddress::Parse(address).ok());
  CHECK(a.tcp->network() == Network::kTcp);
  CHECK(a.tcp->name() == "tcp");
  CHECK(a.tcp->max_payload() == buffers::ClassBytes(kClasses - 1) - wire::kHeaderBytes);

  CHECK(a.tcp->Reaches(kB, "127.0.0.1:7400"));
  CHECK(a.tcp->Reaches(kB, "[::1]:7400"));
  for (const char* bad :
       {"", "127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:07400",
        "127.0.0.1:74x", "localhost:7400", "::1:7400", "[::1]7400", "[::1:7400", "1.2.3:7400"}) {
    INFO(bad);
    CHECK_FALSE(a.tcp->Reaches(kB, bad));
    auto route = a.tcp->Connect(kB, bad);
    REQUIRE_FALSE(route.ok());
    CHECK(route.status().code() == StatusCode::kInvalidArgument);
  }
  auto thread_route = a.tcp->Connect(Gid::Thread(kB, 1), "127.0.0.1:7400");
  CHECK(thread_route.status().code() == StatusCode::kInvalidArgument);

  buffers::PoolBudget budget(1 << 20);
  CollectingSink sink;
  auto reactor = runtime::EpollReactor::Create();
  REQUIRE(reactor.ok());
  TcpOptions options = Options(kB);
  options.num_classes = 0;
  CHECK(TcpSubsystem::Open(options, **reactor, sink, budget).status().code() ==
        StatusCode::kInvalidArgument);
  options = Options(Gid::Thread(kB, 1));
  CHECK(TcpSubsystem::Open(options, **reactor, sink, budget).status().code() ==
        StatusCode::kInvalidArgument);
  options = Options(kB);
  options.handshake_timeout = std::chrono::milliseconds(0);
  CHECK_THAT(TcpSubsystem::Open(options, **reactor, sink, budget).status().message(),
             Catch::Contains("handshake timeout must be positive"));
  options = Options(kB);
  options.max_handshaking = 0;
  CHECK(TcpSubsystem::Open(options, **reactor, sink, budget).status().code() ==
        StatusCode::kInvalidArgument);
  options = Options(kB);
  options.bind_address = "localhost";
  CHECK(TcpSubsystem::Open(options, **reactor, sink, budget).status().code() ==
        StatusCode::kInvalidArgument);
}

// Posts frames 0..count-1 (payload bytes by `size_of`) from a to b on
// `route` while a thread pumps both, calling `before(seq)` ahead of each
// (false: post no more), then waits up to 30 s for them all to arrive and
// the route to drain. Keeps a reference to every `watch_every`th frame and
// returns them, to look at their state.
std::vector<detail::BufferSlot*> Stream(Side& a, Side& b, subsystem::Route& route, uint64_t count,
                                        const std::function<size_t(uint64_t)>& size_of,
                                        uint64_t watch_every,
                                        const std::function<bool(uint64_t)>& before = {}) {
  std::vector<detail::BufferSlot*> watched;
  PumpThread pump({&a, &b});
  for (uint64_t seq = 0; seq < count; ++seq) {
    if (before && !before(seq)) break;
    detail::BufferSlot* slot = NewFrame(a.tcp->pool(), kA, kB, seq, size_of(seq));
    if (seq % watch_every == 0) {
      slot->refs.fetch_add(1);
      watched.push_back(slot);
    }
    REQUIRE(PostRetrying(route, slot, 30s).ok());
  }
  const auto deadline = Clock::now() + 30s;
  while ((b.sink.size() < count || !route.Drained()) && Clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  return watched;
}

// Every watched frame ended kSent; drops the test's references.
void CheckAllSent(const std::vector<detail::BufferSlot*>& watched) {
  for (detail::BufferSlot* slot : watched) {
    CHECK(static_cast<BufferState>(slot->state.load()) == BufferState::kSent);
    slot->pool->Unref(slot);
  }
}

TEST_CASE(
    "connections killed while both sides live lose nothing: the route connects again "
    "and every frame arrives once, in order, and ends kSent",
    "[tcp][kill]") {
  Side a(Options(kA));
  Side b(Options(kB));
  const uint16_t port = SocketAddress::Parse(b.tcp->address())->port();
  auto route = a.tcp->Connect(kB, b.tcp->address());
  REQUIRE(route.ok());
  constexpr uint64_t kFrames = 20000;
  constexpr uint64_t kEvery = 2000;
  int kills = 0;
  const auto watched = Stream(
      a, b, **route, kFrames, [](uint64_t seq) { return 10 + seq % 2000; }, 50,
      [&](uint64_t seq) {
        if (seq % kEvery != kEvery / 2) return true;
        // The sender's socket, then the receiver's, in turn.
        const std::string side = kills % 2 == 0 ? "dst" : "src";
        if (!KillSockets(fmt::format("{} 127.0.0.1:{}", side, port))) {
          WARN("ss -K does not work here: connection kills not tested");
          return false;
        }
        ++kills;
        return true;
      });
  if (kills == 0) return;
  INFO(kills << " kills, " << a.tcp->traffic().connections_lost << " connections lost");
  REQUIRE(b.sink.size() == kFrames);
  REQUIRE((*route)->Drained());
  CHECK_FALSE((*route)->Broken());
  CheckInOrder(b.sink.arrivals());
  CHECK(a.tcp->traffic().connections_lost >= 1);
  CHECK(a.tcp->traffic().routes_broken == 0);
  CheckAllSent(watched);
  CHECK(a.PoolInUse() == 0);
}

// Two processes with a route each way (a conversation).
struct TwoWay {
  TwoWay() {
    auto route_to_b = a.tcp->Connect(kB, b.tcp->address());
    auto route_to_a = b.tcp->Connect(kA, a.tcp->address());
    REQUIRE(route_to_b.ok());
    REQUIRE(route_to_a.ok());
    to_b = std::move(*route_to_b);
    to_a = std::move(*route_to_a);
  }
  Side a{Options(kA)};
  Side b{Options(kB)};
  std::unique_ptr<subsystem::Route> to_b;  // routes last: dropped before the sides
  std::unique_ptr<subsystem::Route> to_a;
};

TEST_CASE(
    "in a conversation every acknowledgement rides on the answer: no write of its own, "
    "even when the side that answered goes to sleep",
    "[tcp][ack]") {
  TwoWay two;
  Side& a = two.a;
  Side& b = two.b;
  subsystem::Route* to_b = two.to_b.get();
  subsystem::Route* to_a = two.to_a.get();
  const Sides sides{&a, &b};
  constexpr uint64_t kRounds = 500;
  std::vector<detail::BufferSlot*> watched;
  auto post = [&](Side& from, Gid self, Gid peer, subsystem::Route& route, uint64_t seq) {
    detail::BufferSlot* slot = NewFrame(from.tcp->pool(), self, peer, seq, 32);
    slot->refs.fetch_add(1);
    watched.push_back(slot);
    REQUIRE(PostPumping(route, slot, sides).ok());
  };
  for (uint64_t i = 0; i < kRounds; ++i) {
    post(a, kA, kB, *to_b, i);
    REQUIRE(PumpUntil(sides, [&] { return b.sink.size() == i + 1; }));
    post(b, kB, kA, *to_a, i);
    // The answering side sleeps now: nothing is owed, the answer carried it.
    b.tcp->PrepareToSleep();
    REQUIRE(PumpUntil(sides, [&] { return a.sink.size() == i + 1; }));
  }
  // The last answer's count goes when its receiver sleeps (nothing carries it).
  a.tcp->PrepareToSleep();
  REQUIRE(PumpUntil(sides, [&] { return to_b->Drained() && to_a->Drained(); }));
  CheckAllSent(watched);

  const TcpTrafficStats from_a = a.tcp->traffic();
  const TcpTrafficStats from_b = b.tcp->traffic();
  INFO("a: " << from_a.acknowledgements_written << " written, " << from_a.acknowledgements_carried
             << " carried; b: " << from_b.acknowledgements_written << " written, "
             << from_b.acknowledgements_carried << " carried");
  // The answers to the two resumes and the last answer's count; a few more
  // if the poller's 200 us timer fired on a slow machine.
  CHECK(from_a.acknowledgements_written + from_b.acknowledgements_written <= 3 + kRounds / 50);
  CHECK(from_b.acknowledgements_carried >= kRounds - kRounds / 50);
  CHECK(from_a.acknowledgements_carried >= kRounds - 1 - kRounds / 50);
  CHECK(from_a.connections_lost + from_b.connections_lost == 0);
  CHECK(a.tcp->traffic().routes_broken == 0);
}

TEST_CASE(
    "a count that rides on reverse traffic and one on the stream's own socket, in any "
    "order, acknowledge each frame once",
    "[tcp][ack]") {
  // Both ways at full speed: counts come on both sockets, overtaking each
  // other; none may be taken for a broken peer and every frame ends kSent.
  TwoWay two;
  Side& a = two.a;
  Side& b = two.b;
  subsystem::Route* to_b = two.to_b.get();
  subsystem::Route* to_a = two.to_a.get();
  constexpr uint64_t kFrames = 5000;
  std::vector<detail::BufferSlot*> watched;
  {
    PumpThread pump({&a, &b});
    for (uint64_t seq = 0; seq < kFrames; ++seq) {
      for (auto [from, self, peer, route] :
           {std::tuple{&a, kA, kB, to_b}, std::tuple{&b, kB, kA, to_a}}) {
        detail::BufferSlot* slot = NewFrame(from->tcp->pool(), self, peer, seq, 10 + seq % 700);
        if (seq % 7 == 0) {
          slot->refs.fetch_add(1);
          watched.push_back(slot);
        }
        // The window full: the pump thread's progress makes room.
        REQUIRE(PostRetrying(*route, slot, 30s).ok());
      }
    }
    const auto deadline = Clock::now() + 30s;
    while ((a.sink.size() < kFrames || b.sink.size() < kFrames || !to_b->Drained() ||
            !to_a->Drained()) &&
           Clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
    }
  }
  REQUIRE(b.sink.size() == kFrames);
  REQUIRE(a.sink.size() == kFrames);
  CheckInOrder(b.sink.arrivals());
  CHECK(to_b->Drained());
  CHECK(to_a->Drained());
  CHECK_FALSE(to_b->Broken());
  CHECK_FALSE(to_a->Broken());
  CheckAllSent(watched);
  CHECK(a.tcp->traffic().acknowledgements_carried + b.tcp->traffic().acknowledgements_carried > 0);
  CHECK(a.PoolInUse() == 0);
}

TEST_CASE("a count riding on reverse traffic never goes into a frame the socket took only part of",
          "[tcp][ack]") {
  // a's large frames fill the socket while b does not read (its sink is
  // congested): a's last write ends inside a frame. Then b's frames make a
  // owe b a count. When b reads again, the rest of that frame must go
  // before the count: put in front of it, the count landed inside the
  // frame's payload (the soak saw long messages arrive with a wrong
  // checksum, the stream's next header garbled). a's queue is larger than
  // the socket buffers can grow here (loopback: 4 MiB to send, 32 MiB to
  // receive), so that they fill before it does.
  TcpOptions options = Options(kA);
  options.max_queued_bytes_per_route = size_t{64} << 20;
  Side a(options);
  Side b(Options(kB));
  auto route_to_b = a.tcp->Connect(kB, b.tcp->address());
  auto route_to_a = b.tcp->Connect(kA, a.tcp->address());
  REQUIRE(route_to_b.ok());
  REQUIRE(route_to_a.ok());
  subsystem::Route* to_b = route_to_b->get();
  subsystem::Route* to_a = route_to_a->get();
  const Sides sides{&a, &b};
  // Both connections up before b stops reading.
  REQUIRE(PostPumping(*to_b, NewFrame(a.tcp->pool(), kA, kB, 0, 100), sides).ok());
  REQUIRE(PostPumping(*to_a, NewFrame(b.tcp->pool(), kB, kA, 0, 100), sides).ok());
  REQUIRE(PumpUntil(sides, [&] { return b.sink.size() == 1 && a.sink.size() == 1; }));
  b.sink.congested = true;

  // Odd sizes, so that a full socket buffer ends inside a frame.
  const size_t size = a.tcp->max_payload() / 2 + 777;
  uint64_t seq = 1;
  detail::BufferSlot* refused = nullptr;
  const auto deadline = Clock::now() + 20s;
  while (refused == nullptr) {
    REQUIRE(Clock::now() < deadline);
    detail::BufferSlot* slot = NewFrame(a.tcp->pool(), kA, kB, seq, size);
    Status status;
    for (int round = 0; round < 100; ++round) {
      status = to_b->Post(slot);
      if (status.code() != StatusCode::kTryAgain) break;
      Pump(sides);
    }
    if (status.code() == StatusCode::kTryAgain) {
      refused = slot;
    } else {
      REQUIRE(status.ok());
      ++seq;
    }
  }
  // b talks to a meanwhile: a owes b a count, which a's next write to b
  // carries.
  for (uint64_t i = 1; i <= 3; ++i) {
    REQUIRE(PostPumping(*to_a, NewFrame(b.tcp->pool(), kB, kA, i, 100), sides).ok());
  }
  REQUIRE(PumpUntil(sides, [&] { return a.sink.size() == 4; }));

  b.sink.congested = false;
  REQUIRE(PostPumping(*to_b, refused, sides).ok());
  ++seq;
  REQUIRE(
      PumpUntil(sides, [&] { return b.sink.size() == seq && to_b->Drained() && to_a->Drained(); }));
  INFO("carried: a " << a.tcp->traffic().acknowledgements_carried << "; connections lost: a "
                     << a.tcp->traffic().connections_lost);
  CheckInOrder(b.sink.arrivals());
  CHECK(a.tcp->traffic().connections_lost + b.tcp->traffic().connections_lost == 0);
  CHECK(a.tcp->traffic().acknowledgements_carried > 0);
}

TEST_CASE("ten thousand frames of mixed sizes arrive whole and in order", "[tcp]") {
  Side a(Options(kA));
  Side b(Options(kB));
  constexpr uint64_t kFrames = 10000;
  auto route = a.tcp->Connect(kB, b.tcp->address());
  REQUIRE(route.ok());

  std::mt19937 random(42);
  const size_t max_payload = a.tcp->max_payload();
  const auto watched = Stream(
      a, b, **route, kFrames,
      [&](uint64_t) -> size_t {
        const uint32_t kind = random() % 10;
        return kind < 6   ? random() % 193
               : kind < 9 ? 193 + random() % 8000
                          : 8193 + random() % (max_payload - 8192);
      },
      100);
  REQUIRE(b.sink.size() == kFrames);
  REQUIRE((*route)->Drained());
  CHECK_FALSE((*route)->Broken());
  CheckInOrder(b.sink.arrivals());
  CheckAllSent(watched);
  CHECK(a.PoolInUse() == 0);
  CHECK(b.PoolInUse() == 0);

  const TcpTrafficStats sent = a.tcp->traffic();
  const TcpTrafficStats received = b.tcp->traffic();
  CHECK(sent.frames_sent == kFrames);
  CHECK(received.frames_received == kFrames);
  CHECK(sent.bytes_sent == received.bytes_received);
  CHECK(received.connections_accepted == 1);
  CHECK(received.connections_rejected == 0);
}

TEST_CASE("a payload of the largest class arrives whole", "[tcp]") {
  Side a(Options(kA, buffers::kMaxClasses));
  Side b(Options(kB, buffers::kMaxClasses));
  const size_t max_payload = a.tcp->max_payload();
  REQUIRE(max_payload == (size_t{1} << 20) - wire::kHeaderBytes);
  auto route = a.tcp->Connect(kB, b.tcp->address());
  REQUIRE(route.ok());
  const size_t sizes[] = {max_payload, 10, max_payload, 0, max_payload - 1, 70000};
  uint64_t seq = 0;
  for (size_t payload : sizes) {
    REQUIRE(PostPumping(**route, NewFrame(a.tcp->pool(), kA, kB, seq++, payload), {&a, &b}).ok());
  }
  REQUIRE(PumpUntil({&a, &b}, [&] { return b.sink.size() == std::size(sizes); }));
  const auto arrivals = b.sink.arrivals();
  CheckInOrder(arrivals);
  for (size_t i = 0; i < std::size(sizes); ++i) CHECK(arrivals[i].header.length == sizes[i]);
  REQUIRE(PumpUntil({&a, &b}, [&] { return (*route)->Drained(); }));
  CHECK(a.PoolInUse() == 0);
}

TEST_CASE("malformed connections are closed with one warning while a good one keeps working",
          "[tcp]") {
  TcpOptions options = Options(kB);
  options.handshake_timeout = 200ms;
  Side a(Options(kA));
  Side b(options);
  auto route = a.tcp->Connect(kB, b.tcp->address());
  REQUIRE(route.ok());
  uint64_t seq = 0;
  auto send_one = [&] {
    REQUIRE(PostPumping(**route, NewFrame(a.tcp->pool(), kA, kB, seq, 100), {&a, &b}).ok());
    ++seq;
    REQUIRE(PumpUntil({&a, &b}, [&] { return b.sink.size() == seq; }));
  };
  send_one();

  const uint32_t max_payload = b.tcp->max_payload();
  const Gid a_thread = Gid::Thread(kA, 1);
  const Gid b_thread = Gid::Thread(kB, 1);
  auto cat = [](std::vector<std::byte> first, const std::vector<std::byte>& second) {
    first.insert(first.end(), second.begin(), second.end());
    return first;
  };
  struct Case {
    const char* name;
    bool handshake;  // a whole handshake first, then `bytes`
    std::vector<std::byte> bytes;
    bool end_stream;  // shut down our side after writing
    const char* expected;
  };
  std::vector<std::byte> truncated_header = HelloBytes(kA, kB);
  truncated_header.resize(30);
  std::vector<std::byte> truncated_frame = Encode(Message(a_thread, b_thread, 1000));
  truncated_frame.resize(truncated_frame.size() + 10);
  const security::ClusterKey none;
  std::vector<Case> cases = {
      {"bad magic", false, std::vector<std::byte>(64, std::byte{0xab}), false, "bad magic"},
      {"truncated header", false, truncated_header, true, "ended inside a header (30 of 64 bytes)"},
      {"message before hello", false, Encode(Message(a_thread, b_thread, 0)), false,
       "a frame before the hello"},
      {"hello for someone else", false, HelloBytes(kA, Gid::Process(1, 5)), false,
       "a handshake for h1.p5, but this is h1.p2"},
      {"hello from a thread", false, HelloBytes(a_thread, kB), false, "both must be processes"},
      {"hello without a nonce", false,
       [] {
         wire::Header hello = Handshake(wire::FrameKind::kHello, kA, kB);
         hello.length = 0;
         return Encode(hello);
       }(),
       false, "a hello frame of 0 bytes (it carries 32)"},
      {"message before the proof", false,
       cat(HelloBytes(kA, kB), Encode(Message(a_thread, b_thread, 0))), false,
       "a frame before the handshake proof"},
      {"a proof of zeros", false,
       cat(HelloBytes(kA, kB),
           Encode(Handshake(wire::FrameKind::kProof, kA, kB), wire::kHandshakeMacBytes)),
       false, "the peer that connected does not hold this cluster's secret"},
      {"a proof from another process", false,
       cat(HelloBytes(kA, kB), Encode(Handshake(wire::FrameKind::kProof, Gid::Process(1, 9), kB),
                                      wire::kHandshakeMacBytes)),
       false, "a proof from h1.p9 on the connection of h1.p1"},
      {"impossible length", true, Encode(Message(a_thread, b_thread, max_payload + 1)), false,
       "exceeds the limit"},
      {"huge length", true, Encode(Message(a_thread, b_thread, 0xffffffffu)), false,
       "exceeds the limit"},
      {"second hello", true, HelloBytes(kA, kB), false, "a handshake frame after the handshake"},
      {"wrong source", true, Encode(Message(Gid::Thread(1, 9, 1), b_thread, 0)), false,
       "a message from h1.p9.t1 on the connection of h1.p1"},
      {"wrong destination", true, Encode(Message(a_thread, Gid::Thread(1, 7, 1), 0)), false,
       "a message for h1.p7.t1, but this is h1.p2"},
  };

  LogCapture log;
  for (const Case& c : cases) {
    INFO(c.name);
    log.Clear();
    Fd raw = c.handshake ? RawHandshake(b.tcp->address(), kA, kB, none, {&b})
                         : RawConnect(b.tcp->address());
    RawWrite(raw, c.bytes);
    if (c.end_stream) shutdown(raw.get(), SHUT_WR);
    REQUIRE(ClosedByPeer(raw, {&b}));
    const auto lines = log.Lines();
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].starts_with("tocl tcp: closing connection from 127.0.0.1:"));
    CHECK(lines[0].find(c.expected) != std::string::npos);
    CHECK(b.sink.size() == seq);  // nothing of it was delivered
    send_one();                   // the good connection still works
  }

  SECTION("a connection that never finishes its handshake is closed by housekeeping") {
    const bool says_hello = GENERATE(false, true);
    INFO((says_hello ? "hello, no proof" : "silent"));
    log.Clear();
    Fd raw = RawConnect(b.tcp->address());
    if (says_hello) RawWrite(raw, HelloBytes(kA, kB));
    const auto connected = Clock::now();
    REQUIRE(PumpUntil({&b}, [&] { return b.tcp->inbound_connections() == 2; }));
    b.tcp->Housekeeping();
    CHECK(b.tcp->inbound_connections() == 2);  // not yet
    // Housekeeping closes it once the 200 ms handshake timeout has passed, not before.
    REQUIRE(PumpUntil({&b}, [&] {
      b.tcp->Housekeeping();
      return b.tcp->inbound_connections() == 1;
    }));
    CHECK(Clock::now() - connected >= 200ms);
    REQUIRE(ClosedByPeer(raw, {&b}));
    const auto lines = log.Lines();
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].find("no finished handshake within 200 ms") != std::string::npos);
  }
  SECTION("a connection that ends cleanly between frames is closed without a warning") {
    log.Clear();
    {
      Fd raw = RawHandshake(b.tcp->address(), kA, kB, none, {&b});
      RawWrite(raw, Encode(Message(a_thread, b_thread, 0)));
      REQUIRE(PumpUntil({&b}, [&] { return b.sink.size() == seq + 1; }));
    }
    REQUIRE(PumpUntil({&b}, [&] { return b.tcp->inbound_connections() == 1; }));
    CHECK(log.Lines().empty());
    ++seq;  // the raw message counts
  }
  SECTION("a resumed stream that ends inside a frame is closed without a warning") {
    // A sender killed mid-write, or its socket reset: what it had not
    // finished is not delivered, and its stream (if it lives) sends it again.
    log.Clear();
    Fd raw = RawHandshake(b.tcp->address(), kA, kB, none, {&b});
    RawWrite(raw, truncated_frame);
    shutdown(raw.get(), SHUT_WR);
    REQUIRE(ClosedByPeer(raw, {&b}));
    CHECK(log.Lines().empty());
    CHECK(b.sink.size() == seq);
  }
  send_one();
  CHECK(b.tcp->inbound_connections() == 1);
  CHECK(b.tcp->traffic().connections_rejected >= cases.size());
}

TEST_CASE("only processes that hold the cluster's secret exchange messages", "[tcp][security]") {
  const auto key = [](char fill) {
    return security::ClusterKey::FromHex(std::string(64, fill)).value();
  };
  auto keyed = [&](Gid self, std::optional<char> fill) {
    TcpOptions options = Options(self);
    if (fill) options.key = key(*fill);
    return options;
  };

  SECTION("the same secret: messages flow") {
    Side a(keyed(kA, 'a'));
    Side b(keyed(kB, 'a'));
    auto route = a.tcp->Connect(kB, b.tcp->address());
    REQUIRE(route.ok());
    for (uint64_t seq = 0; seq < 10; ++seq) {
      REQUIRE(PostPumping(**route, NewFrame(a.tcp->pool(), kA, kB, seq, 1000), {&a, &b}).ok());
    }
    REQUIRE(PumpUntil({&a, &b}, [&] { return b.sink.size() == 10; }));
    CheckInOrder(b.sink.arrivals());
  }

  SECTION("another secret, or none on one side: the route breaks, nothing arrives") {
    const auto [sender_key, receiver_key] =
        GENERATE(std::pair<std::optional<char>, std::optional<char>>{'a', 'b'},
                 std::pair<std::optional<char>, std::optional<char>>{'a', std::nullopt},
                 std::pair<std::optional<char>, std::optional<char>>{std::nullopt, 'b'});
    LogCapture log;
    Side a(keyed(kA, sender_key));
    Side b(keyed(kB, receiver_key));
    auto route = a.tcp->Connect(kB, b.tcp->address());
    REQUIRE(route.ok());
    detail::BufferSlot* slot = NewFrame(a.tcp->pool(), kA, kB, 0, 100);
    slot->refs.fetch_add(1);  // ours, to read its state after the route gives it back
    REQUIRE((*route)->Post(slot).ok());
    REQUIRE(PumpUntil({&a, &b}, [&] { return (*route)->Broken(); }));
    CHECK(slot->state.load() == static_cast<uint8_t>(BufferState::kFailed));
    a.tcp->pool().Unref(slot);
    CHECK(b.sink.size() == 0);
    CHECK((*route)->Post(NewFrame(a.tcp->pool(), kA, kB, 1, 100)).code() ==
          StatusCode::kUnavailable);
    // The sender saw the acceptor fail its MAC: the acceptor never sees a proof.
    const auto lines = log.Lines();
    REQUIRE_FALSE(lines.empty());
    CHECK_THAT(lines[0], Catch::Contains("peer that accepted does not hold this cluster's secret"));
  }

  SECTION("a stranger's raw connection with a wrong secret gets nothing in") {
    LogCapture log;
    Side b(keyed(kB, 'b'));
    bool acceptor_ok = true;
    Fd raw = RawHandshake(b.tcp->address(), kA, kB, key('c'), {&b}, &acceptor_ok);
    CHECK_FALSE(acceptor_ok);  // we could tell b is not of our cluster
    RawWrite(raw, Encode(Message(Gid::Thread(kA, 1), Gid::Thread(kB, 1), 0)));
    REQUIRE(ClosedByPeer(raw, {&b}));
    CHECK(b.sink.size() == 0);
    const auto lines = log.Lines();
    REQUIRE(lines.size() == 1);
    CHECK_THAT(lines[0], Catch::Contains("the peer that connected does not hold"));
  }
}

TEST_CASE("a route to a listener that never answers the hello breaks after the timeout",
          "[tcp][security]") {
  TcpOptions options = Options(kA);
  options.handshake_timeout = 200ms;
  Side a(options);
  // A socket that accepts (the kernel does, from the backlog) and says nothing.
  std::string address;
  auto mute = ListenAnyPort("127.0.0.1", 4, &address);
  REQUIRE(mute.ok());

  LogCapture log;
  auto route = a.tcp->Connect(kB, address);
  REQUIRE(route.ok());
  REQUIRE((*route)->Post(NewFrame(a.tcp->pool(), kA, kB, 0, 100)).ok());
  const auto posted = Clock::now();
  REQUIRE(PumpUntil({&a}, [&] {
    a.tcp->Housekeeping();
    return (*route)->Broken();
  }));
  CHECK(Clock::now() - posted >= 200ms);
  REQUIRE(PumpUntil({&a}, [&] { return (*route)->Drained(); }));
  CHECK(a.PoolInUse() == 0);
  const auto lines = log.Lines();
  REQUIRE(lines.size() == 1);
  CHECK_THAT(lines[0], Catch::Contains("no answer to our hello within 200 ms") &&
                           Catch::Contains("1 queued frames failed"));
}

// A poller that spins looks at the fds only now and then unless the
// subsystem asks for every round: a route waiting for its handshake answer
// must ask, or the answer (and every frame queued behind it) waits for the
// poller's next look, which a busy process may put off for seconds.
TEST_CASE("a route waiting for connect or handshake answer has the poller watch its fd each round",
          "[tcp]") {
  Side a(Options(kA));
  Side b(Options(kB));
  std::string mute_address;
  auto mute = ListenAnyPort("127.0.0.1", 4, &mute_address);
  REQUIRE(mute.ok());
  CHECK_FALSE(a.tcp->WantsReactorEachRound());

  auto unanswered = a.tcp->Connect(kB, mute_address);
  REQUIRE(unanswered.ok());
  CHECK(a.tcp->WantsReactorEachRound());
  // The mute listener takes the hello and never answers.
  Fd accepted(accept4(mute->get(), nullptr, nullptr, SOCK_CLOEXEC));
  REQUIRE(accepted.valid());
  const auto hello = testing::RawRead(accepted, wire::kHeaderBytes, {&a});
  CHECK(hello.size() == wire::kHeaderBytes);
  PumpRounds({&a}, 10);
  CHECK(a.tcp->WantsReactorEachRound());
  unanswered->reset();
  PumpRounds({&a}, 2);
  CHECK_FALSE(a.tcp->WantsReactorEachRound());

  // Answered and drained: nothing left to wait for.
  auto route = a.tcp->Connect(kB, b.tcp->address());
  REQUIRE(route.ok());
  CHECK(a.tcp->WantsReactorEachRound());
  REQUIRE(PostPumping(**route, NewFrame(a.tcp->pool(), kA, kB, 0, 100), {&a, &b}).ok());
  REQUIRE(PumpUntil({&a, &b}, [&] { return b.sink.size() == 1 && (*route)->Drained(); }));
  CHECK_FALSE(a.tcp->WantsReactorEachRound());
}

TEST_CASE("connections in their handshake are capped: the oldest makes room", "[tcp][security]") {
  TcpOptions options = Options(kB);
  options.max_handshaking = 3;
  Side a(Options(kA));
  Side b(options);
  LogCapture log;
  std::vector<Fd> silent;
  for (int i = 0; i < 5; ++i) {
    silent.push_back(RawConnect(b.tcp->address()));
    REQUIRE(
        PumpUntil({&b}, [&] { return b.tcp->traffic().connections_accepted == size_t(i + 1); }));
  }
  // The first two were closed to make room for the later ones.
  CHECK(ClosedByPeer(silent[0], {&b}));
  CHECK(ClosedByPeer(silent[1], {&b}));
  CHECK(b.tcp->inbound_connections() == 3);
  const auto lines = log.Lines();
  REQUIRE(lines.size() == 2);
  CHECK_THAT(lines[0],
             Catch::Contains("closed to make room: 3 connections were in their handshake"));
  // A real peer still gets in (closing another silent one).
  auto route = a.tcp->Connect(kB, b.tcp->address());
  REQUIRE(route.ok());
  REQUIRE(PostPumping(**route, NewFrame(a.tcp->pool(), kA, kB, 0, 100), {&a, &b}).ok());
  REQUIRE(PumpUntil({&a, &b}, [&] { return b.sink.size() == 1; }));
}

TEST_CASE("a route to a port nobody listens on is broken and says why", "[tcp]") {
  Side a(Options(kA));
  const std::string address = "127.0.0.1:" + std::to_string(UnusedPort());
  LogCapture log;
  auto route = a.tcp->Connect(kB, address);
  REQUIRE(route.ok());
  REQUIRE(PumpUntil({&a}, [&] { return (*route)->Broken(); }));
  detail::BufferSlot* slot = NewFrame(a.tcp->pool(), kA, kB, 0, 10);
  Status status = (*route)->Post(slot);
  CHECK(status.code() == StatusCode::kUnavailable);
  CHECK(status.message() ==
        "cannot connect to h1.p2 at " + address + ": connect: Connection refused");
  CHECK(log.Lines().size() == 1);
  a.tcp->pool().Unref(slot);
}

TEST_CASE(
    "a route whose peer goes away is down, keeps its frames and breaks after the "
    "unreachable timeout",
    "[tcp]") {
  TcpOptions options = Options(kA);
  options.max_queued_bytes_per_route = 256 << 10;
  options.unreachable_timeout = 300ms;
  Side a(options);
  auto b = std::make_unique<Side>(Options(kB));
  const std::string b_address = b->tcp->address();
  auto route = a.tcp->Connect(kB, b_address);
  REQUIRE(route.ok());

  SECTION("with frames queued (the peer stopped reading)") {
    b->sink.congested = true;
    std::vector<detail::BufferSlot*> held;
    const auto deadline = Clock::now() + 20s;
    for (uint64_t seq = 0;; ++seq) {
      REQUIRE(Clock::now() < deadline);
      detail::BufferSlot* slot = NewFrame(a.tcp->pool(), kA, kB, seq, 4000);
      slot->refs.fetch_add(1);
      Status status;
      for (int round = 0; round < 100; ++round) {
        status = (*route)->Post(slot);
        if (status.code() != StatusCode::kTryAgain) break;
        Pump({&a, b.get()});
      }
      if (status.code() == StatusCode::kTryAgain) {
        a.tcp->pool().Unref(slot);
        a.tcp->pool().Unref(slot);
        break;
      }
      REQUIRE(status.ok());
      held.push_back(slot);
    }
    REQUIRE_FALSE((*route)->Drained());
    CHECK(b->sink.size() == 0);
    b.reset();  // closes with unread data: the kernel resets the connection
    REQUIRE(PumpUntil({&a}, [&] { return (*route)->Down(); }));
    CHECK_FALSE((*route)->Broken());
    // Nothing acknowledged them: every one is still held, none failed yet.
    for (detail::BufferSlot* slot : held) {
      CHECK(static_cast<BufferState>(slot->state.load()) == BufferState::kInFlight);
    }
    const auto down_at = Clock::now();
    REQUIRE(PumpUntil({&a}, [&] { return (*route)->Broken(); }));
    CHECK(Clock::now() - down_at >= 250ms);
    for (detail::BufferSlot* slot : held) {
      CHECK(static_cast<BufferState>(slot->state.load()) == BufferState::kFailed);
      slot->pool->Unref(slot);
    }
    CHECK((*route)->Drained());
  }
  SECTION("with nothing queued (the peer closed between frames)") {
    REQUIRE(PostPumping(**route, NewFrame(a.tcp->pool(), kA, kB, 0, 10), {&a, b.get()}).ok());
    REQUIRE(PumpUntil({&a, b.get()}, [&] { return b->sink.size() == 1 && (*route)->Drained(); }));
    b.reset();
    REQUIRE(PumpUntil({&a}, [&] { return (*route)->Down(); }));
    // Nothing to send: no attempt to connect, however long it stays so.
    PumpRounds({&a}, 1000);
    CHECK_FALSE((*route)->Broken());
    CHECK(a.tcp->traffic().connections_lost == 1);
    // A frame posted now starts the clock: refused attempts, then broken.
    detail::BufferSlot* waiting = NewFrame(a.tcp->pool(), kA, kB, 1, 10);
    waiting->refs.fetch_add(1);
    REQUIRE((*route)->Post(waiting).ok());
    REQUIRE(PumpUntil({&a}, [&] { return (*route)->Broken(); }));
    CHECK(static_cast<BufferState>(waiting->state.load()) == BufferState::kFailed);
    a.tcp->pool().Unref(waiting);
  }
  detail::BufferSlot* slot = NewFrame(a.tcp->pool(), kA, kB, 99, 10);
  Status status = (*route)->Post(slot);
  CHECK(status.code() == StatusCode::kUnavailable);
  CHECK_THAT(status.message(), Catch::Contains("h1.p2 at " + b_address) &&
                                   Catch::Contains("not restored within 300 ms"));
  CHECK(static_cast<BufferState>(slot->state.load()) == BufferState::kIdle);  // not taken
  a.tcp->pool().Unref(slot);
  CHECK(a.PoolInUse() == 0);
  CHECK(a.tcp->traffic().routes_broken == 1);
}

TEST_CASE("a congested receiver stops reading, the sender's queue fills, nothing is lost",
          "[tcp]") {
  TcpOptions options = Options(kA);
  options.max_queued_bytes_per_route = 512 << 10;
  Side a(options);
  Side b(Options(kB));
  auto route = a.tcp->Connect(kB, b.tcp->address());
  REQUIRE(route.ok());
  b.sink.congested = true;

  // Post until the route says TryAgain (socket buffers and queue full).
  uint64_t seq = 0;
  detail::BufferSlot* refused = nullptr;
  const auto deadline = Clock::now() + 20s;
  while (refused == nullptr) {
    REQUIRE(Clock::now() < deadline);
    detail::BufferSlot* slot = NewFrame(a.tcp->pool(), kA, kB, seq, 1000);
    Status status;
    for (int round = 0; round < 100; ++round) {
      status = (*route)->Post(slot);
      if (status.code() != StatusCode::kTryAgain) break;
      Pump({&a, &b});
    }
    if (status.code() == StatusCode::kTryAgain) {
      refused = slot;
    } else {
      REQUIRE(status.ok());
      ++seq;
    }
  }
  const uint64_t posted = seq;
  INFO("posted " << posted << " frames before TryAgain");
  CHECK(posted > 100);
  PumpRounds({&a, &b}, 200);
  CHECK(b.sink.size() == 0);
  CHECK((*route)->Post(refused).code() == StatusCode::kTryAgain);
  // The paused connection is out of the epoll set: nothing wakes the poller.
  CHECK(b.reactor->Wait(0) == 0);
  CHECK(a.reactor->Wait(0) == 0);

  b.sink.congested = false;
  REQUIRE(PostPumping(**route, refused, {&a, &b}).ok());
  ++seq;
  for (int i = 0; i < 1000; ++i, ++seq) {
    REQUIRE(PostPumping(**route, NewFrame(a.tcp->pool(), kA, kB, seq, 1000), {&a, &b}).ok());
  }
  REQUIRE(PumpUntil({&a, &b}, [&] { return b.sink.size() == seq && (*route)->Drained(); }));
  CheckInOrder(b.sink.arrivals());
  CHECK(a.PoolInUse() == 0);
}

TEST_CASE("a receiver whose pool is at its cap pauses and resumes when buffers come back",
          "[tcp]") {
  TcpOptions options = Options(kA);
  options.max_queued_bytes_per_route = size_t{32} << 20;
  Side a(options);
  Side b(Options(kB), size_t{1} << 20);  // room for about a thousand 1 KiB buffers
  b.sink.keep = true;
  auto route = a.tcp->Connect(kB, b.tcp->address());
  REQUIRE(route.ok());

  uint64_t seq = 0;
  const uint64_t kFrames = 20000;
  const auto deadline = Clock::now() + 20s;
  // More than B's pool holds: B pauses at its cap, A's queue takes the rest.
  for (; seq < kFrames; ++seq) {
    REQUIRE(Clock::now() < deadline);
    REQUIRE(PostPumping(**route, NewFrame(a.tcp->pool(), kA, kB, seq, 900), {&a, &b}, 2s).ok());
  }
  PumpRounds({&a, &b}, 200);
  const size_t held = b.sink.size();
  INFO(held << " frames arrived before the cap");
  CHECK(held > 0);
  CHECK(held < kFrames);
  CHECK_FALSE((*route)->Drained());

  b.sink.keep = false;
  b.sink.ReleaseKept();
  REQUIRE(PumpUntil({&a, &b}, [&] { return b.sink.size() == kFrames && (*route)->Drained(); }));
  CheckInOrder(b.sink.arrivals());
  CHECK(b.PoolInUse() == 0);
}

TEST_CASE("closing the subsystem fails what is queued and refuses new routes", "[tcp]") {
  TcpOptions options = Options(kA);
  options.max_queued_bytes_per_route = 256 << 10;
  Side a(options);
  Side b(Options(kB));
  b.sink.congested = true;
  auto route = a.tcp->Connect(kB, b.tcp->address());
  REQUIRE(route.ok());
  std::vector<detail::BufferSlot*> held;
  const auto deadline = Clock::now() + 20s;
  for (uint64_t seq = 0;; ++seq) {
    REQUIRE(Clock::now() < deadline);
    detail::BufferSlot* slot = NewFrame(a.tcp->pool(), kA, kB, seq, 4000);
    slot->refs.fetch_add(1);
    Status status = (*route)->Post(slot);
    if (!status.ok()) {
      REQUIRE(status.code() == StatusCode::kTryAgain);
      slot->pool->Unref(slot);
      slot->pool->Unref(slot);
      break;
    }
    held.push_back(slot);
    Pump({&a, &b});
  }
  REQUIRE_FALSE((*route)->Drained());
  a.tcp->Close();
  CHECK((*route)->Broken());
  CHECK((*route)->Drained());
  size_t failed = 0;
  for (detail::BufferSlot* slot : held) {
    const auto state = static_cast<BufferState>(slot->state.load());
    CHECK((state == BufferState::kSent || state == BufferState::kFailed));
    failed += state == BufferState::kFailed;
    slot->pool->Unref(slot);
  }
  CHECK(failed > 0);
  CHECK(a.tcp->Connect(kB, b.tcp->address()).status().code() == StatusCode::kFailedPrecondition);
  CHECK((*route)->PostCopy(wire::Header{}, {}).code() == StatusCode::kUnimplemented);
}

TEST_CASE("routes dropped while the poller runs give back every buffer", "[tcp]") {
  Side a(Options(kA));
  Side b(Options(kB));
  {
    PumpThread pump({&a, &b});
    for (int i = 0; i < 50; ++i) {
      auto route = a.tcp->Connect(kB, b.tcp->address());
      REQUIRE(route.ok());
      for (uint64_t seq = 0; seq < 20; ++seq) {
        detail::BufferSlot* slot = NewFrame(a.tcp->pool(), kA, kB, seq, 100 + 3000 * (seq % 3));
        if (!(*route)->Post(slot).ok()) a.tcp->pool().Unref(slot);
      }
      // Dropped at once, maybe with frames queued or half written.
    }
  }
  REQUIRE(
      PumpUntil({&a, &b}, [&] { return a.PoolInUse() == 0 && b.tcp->inbound_connections() == 0; }));
  for (const Arrival& arrival : b.sink.arrivals()) CHECK(arrival.intact);
}

TEST_CASE("a tcp subsystem bound to an IPv6 address publishes [IP]:PORT", "[tcp]") {
  TcpOptions options = Options(kB);
  options.bind_address = "::1";
  buffers::PoolBudget budget(16 << 20);
  CollectingSink sink;
  auto reactor = runtime::EpollReactor::Create();
  REQUIRE(reactor.ok());
  if (!TcpSubsystem::Open(options, **reactor, sink, budget).ok()) {
    WARN("no IPv6 loopback here: skipped");
    return;
  }
  Side a(Options(kA));
  Side b(options);
  REQUIRE(b.tcp->address().starts_with("[::1]:"));
  auto route = a.tcp->Connect(kB, b.tcp->address());
  REQUIRE(route.ok());
  REQUIRE(PostPumping(**route, NewFrame(a.tcp->pool(), kA, kB, 0, 500), {&a, &b}).ok());
  REQUIRE(PumpUntil({&a, &b}, [&] { return b.sink.size() == 1; }));
  CheckInOrder(b.sink.arrivals());
}

}  // namespace
}  // namespace tocl::subsystem::tcp
