// The two streams of a via (peer, class) entry across the VIs that carry
// them (subsystem/via/stream_pair.h): where a new VI resumes each way, and
// which arriving frames are second copies. Two StreamPairs play the two
// processes; no VI, no provider.
#include "subsystem/via/stream_pair.h"

#include <catch2/catch.hpp>
#include <vector>

#include "buffers/buffer_pool.h"
#include "subsystem_harness.h"

namespace tocl::subsystem::via {
namespace {

constexpr Gid kA = Gid::Process(1, 1);
constexpr Gid kB = Gid::Process(1, 2);
constexpr size_t kFrame = wire::kHeaderBytes + 100;

struct Fixture {
  Fixture() : pool(Network::kVia, 4, memory, budget) {}
  ~Fixture() {
    for (detail::BufferSlot* slot : slots) pool.Unref(slot);
  }
  // Frames of 100 payload bytes into `pair`'s window, each with a second
  // reference for the test.
  void Post(StreamPair& pair, int count) {
    for (int i = 0; i < count; ++i) {
      detail::BufferSlot* slot = testing::NewFrame(pool, kA, kB, slots.size(), 100);
      slot->refs.fetch_add(1);
      slots.push_back(slot);
      pair.window().Push({slot, kFrame});
    }
  }
  BufferState StateOf(size_t i) const { return static_cast<BufferState>(slots[i]->state.load()); }

  buffers::PoolBudget budget{size_t{16} << 20};
  buffers::AnonymousSlabMemory memory;
  buffers::BufferPool pool;
  std::vector<detail::BufferSlot*> slots;
};

// The request the requester sends and the accept the acceptor answers
// with; each side agrees from its own and the other's.
struct Connect {
  Connect(StreamPair& requester, StreamPair& acceptor) {
    requester.Describe(request);
    acceptor.Describe(accept);
    auto acceptor_side = acceptor.Agree(accept, request);
    REQUIRE(acceptor_side.ok());
    auto requester_side = requester.Agree(request, accept);
    REQUIRE(requester_side.ok());
    at_acceptor = *acceptor_side;
    at_requester = *requester_side;
  }
  ConnectData request, accept;
  StreamPair::Resume at_requester{}, at_acceptor{};
};

// Two processes' pairs whose first VI connected (A asked), and the
// frames A posts.
struct Connected : Fixture {
  StreamPair a, b;
  const Connect first{a, b};
};

// "Sends" `count` frames of `from`'s window from where the VI resumes.
void Send(StreamPair& from, size_t count) {
  for (size_t i = 0; i < count; ++i) from.window().Written(kFrame);
}

// The next `count` frames of the peer's stream reach `to`, each a first copy.
void Arrive(StreamPair& to, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i) {
    const Result<bool> fresh = to.Arrived(to.received());
    REQUIRE(fresh.ok());
    REQUIRE(*fresh);
  }
}

TEST_CASE("counts widen to the nearest full number across 2^32", "[via][stream]") {
  CHECK(WidenCount(0, 0) == 0);
  CHECK(WidenCount(100, 90) == 90);
  CHECK(WidenCount(100, 110) == 110);
  CHECK(WidenCount(0xFFFFFFF0u, 0x10) == 0x100000010u);
  CHECK(WidenCount(0x100000010u, 0xFFFFFFF0u) == 0xFFFFFFF0u);
  CHECK(WidenCount(uint64_t{5} << 32, 3) == (uint64_t{5} << 32) + 3);
}

TEST_CASE("a first VI starts both streams at frame 0", "[via][stream]") {
  StreamPair a, b;
  CHECK(a.stream() != 0);
  CHECK(a.stream() != b.stream());
  const Connect first(a, b);
  CHECK(first.at_requester.send_from == 0);
  CHECK(first.at_requester.receive_from == 0);
  CHECK(first.at_acceptor.send_from == 0);
  CHECK(first.at_acceptor.receive_from == 0);
  CHECK(a.peer_stream() == b.stream());
  CHECK(b.peer_stream() == a.stream());
}

TEST_CASE_METHOD(Connected,
                 "a VI that replaces a broken one resends exactly what the peer lacks, each way",
                 "[via][stream]") {
  // A posted 10 frames and sent 8 on the first VI; B handed 5 on, the
  // other 3 died with the VI. B sent nothing.
  Post(a, 10);
  Send(a, 8);
  Arrive(b, 5);
  // B acknowledged 3 of them before the VI broke.
  a.window().Acknowledge(3);
  CHECK(StateOf(2) == BufferState::kSent);
  CHECK(StateOf(3) != BufferState::kSent);

  SECTION("the sender reconnects") {
    const Connect again(a, b);
    CHECK(again.at_requester.send_from == 5);  // B has 5
    CHECK(again.at_acceptor.receive_from == 5);
  }
  SECTION("the receiver reconnects") {
    const Connect again(b, a);
    CHECK(again.at_acceptor.send_from == 5);
    CHECK(again.at_requester.receive_from == 5);
  }
  // Either way the VI goes on with frame 5; the old VI may still bring
  // frames 5.. first: then the new VI's copies are second ones.
  REQUIRE(*b.Arrived(5));
  CHECK_FALSE(*b.Arrived(5));
  CHECK(b.received() == 6);
  auto gap = b.Arrived(7);
  REQUIRE_FALSE(gap.ok());
  CHECK(gap.status().message().find("frame 7") != std::string::npos);
}

TEST_CASE_METHOD(Connected, "frames taken to another network move the receiver's count past them",
                 "[via][stream]") {
  Post(a, 6);
  Send(a, 6);
  Arrive(b, 2);
  // The VI broke; the runtime took the 6 frames (B had 2 of them: the
  // runtime drops its second copies) and A posts 3 more.
  const std::vector<tcp::SendWindow::Entry> taken = a.window().Take();
  CHECK(taken.size() == 6);
  for (const auto& frame : taken) frame.slot->pool->Unref(frame.slot);  // the runtime's now
  Post(a, 3);
  const Connect again(a, b);
  CHECK(again.at_requester.send_from == 6);
  CHECK(again.at_acceptor.receive_from == 6);
  CHECK(b.received() == 6);
  CHECK(*b.Arrived(6));
}

TEST_CASE_METHOD(Connected,
                 "a peer that claims frames that were never sent is refused and nothing changes",
                 "[via][stream]") {
  Post(a, 4);
  Send(a, 2);
  ConnectData request, accept;
  a.Describe(request);
  b.Describe(accept);
  accept.received = 3;  // only 2 were sent
  const uint64_t peer_stream = a.peer_stream();
  auto refused = a.Agree(request, accept);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kInvalidArgument);
  CHECK(refused.status().message().find("has 3 frames") != std::string::npos);
  CHECK(a.peer_stream() == peer_stream);
  CHECK(a.window().base() == 0);
}

TEST_CASE_METHOD(
    Connected,
    "a stream begun anew is counted from its start, and counts of the old one are ignored",
    "[via][stream]") {
  Post(a, 3);
  Send(a, 3);
  Arrive(b, 3);
  a.window().Acknowledge(3);
  // A's entry broke and starts again: a new stream, numbered from 0.
  const uint64_t old_stream = a.stream();
  a.Renew();
  CHECK(a.stream() != old_stream);
  CHECK(a.window().base() == 0);
  Post(a, 2);
  const Connect again(b, a);  // B asks, still counting A's old stream
  CHECK(again.request.peer_stream == old_stream);
  CHECK(again.at_acceptor.send_from == 0);  // B's count is of another stream
  CHECK(again.at_requester.receive_from == 0);
  CHECK(b.peer_stream() == a.stream());
  CHECK(b.received() == 0);
  CHECK(*b.Arrived(0));
}

TEST_CASE_METHOD(Connected, "counts stay right past 2^32 frames", "[via][stream]") {
  // B has handed on 2^32 + 5 frames of A's stream (as if): frames numbered
  // past 2^32 arrive in order.
  const uint64_t far = (uint64_t{1} << 32) + 5;
  // Walk B's count there the cheap way: A's base moved there (taken), and a
  // VI tells B.
  for (uint64_t moved = 0; moved < far;) {
    // Windows are short; the count moves in steps under 2^31.
    const uint64_t step = std::min<uint64_t>(far - moved, uint64_t{1} << 30);
    // A fake base: what a window at `moved + step` would announce.
    ConnectData request, accept;
    a.Describe(request);
    request.base = static_cast<uint32_t>(moved + step);
    b.Describe(accept);
    REQUIRE(b.Agree(accept, request).ok());
    moved += step;
  }
  CHECK(b.received() == far);
  CHECK(*b.Arrived(far));
  CHECK_FALSE(*b.Arrived(far - 1));
}

}  // namespace
}  // namespace tocl::subsystem::via
