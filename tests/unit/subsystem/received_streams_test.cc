// What an acceptor keeps of its peers' tcp streams
// (subsystem/tcp/received_streams.h): a stream resumes where its count
// stands on a new connection, replacing the old one, and idle streams are
// forgotten after their linger or past the cap.
#include "subsystem/tcp/received_streams.h"

#include <catch2/catch.hpp>
#include <chrono>

namespace tocl::subsystem::tcp {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr Gid kPeer = Gid::Process(1, 7);

// Stand-ins: only their addresses are used.
InboundConnection* Connection(int i) {
  static char storage[8];
  return reinterpret_cast<InboundConnection*>(&storage[i]);
}

TEST_CASE("a stream resumes on a new connection where its count stands, replacing the old one",
          "[tcp][streams]") {
  ReceivedStreams streams;
  InboundConnection* replaced = Connection(7);
  ReceivedStream& stream = streams.Resume(kPeer, 0x51, 0, Connection(1), &replaced);
  CHECK(replaced == nullptr);
  CHECK(stream.received == 0);
  stream.received = 40;  // frames delivered, 30 of them acknowledged
  stream.reported = 30;

  // The sender lost its connection and holds frames from 30 on.
  ReceivedStream& again = streams.Resume(kPeer, 0x51, 30, Connection(2), &replaced);
  CHECK(&again == &stream);
  CHECK(replaced == Connection(1));  // to close: what it has not read is sent again
  CHECK(again.received == 40);       // it writes from 40 on
  CHECK(again.reported == 40);       // the answer to the resume reports it
  CHECK(streams.size() == 1);

  // Frames the sender moved to another network: the count jumps to its base.
  ReceivedStream& moved = streams.Resume(kPeer, 0x51, 55, Connection(3), &replaced);
  CHECK(moved.received == 55);
  CHECK(replaced == Connection(2));

  // Another stream of the same peer (another route) is its own.
  ReceivedStream& other = streams.Resume(kPeer, 0x52, 0, Connection(4), &replaced);
  CHECK(&other != &stream);
  CHECK(replaced == nullptr);
  CHECK(streams.size() == 2);
}

TEST_CASE("an idle stream is forgotten after its linger, one with a connection never",
          "[tcp][streams]") {
  ReceivedStreams streams;
  InboundConnection* replaced = nullptr;
  ReceivedStream& idle = streams.Resume(kPeer, 1, 0, Connection(1), &replaced);
  streams.Resume(kPeer, 2, 0, Connection(2), &replaced);
  const auto now = Clock::now();
  streams.Detach(idle, Connection(5), now);  // not its connection: nothing
  CHECK(idle.connection == Connection(1));
  streams.Detach(idle, Connection(1), now);
  CHECK(idle.connection == nullptr);
  streams.Expire(now + 59s, 60s);
  CHECK(streams.size() == 2);
  streams.Expire(now + 60s, 60s);
  CHECK(streams.size() == 1);  // stream 2 has its connection still
  streams.Expire(now + std::chrono::hours(1), 60s);
  CHECK(streams.size() == 1);
}

TEST_CASE("past the cap of idle streams the oldest are forgotten first", "[tcp][streams]") {
  ReceivedStreams streams;
  InboundConnection* replaced = nullptr;
  const auto start = Clock::now();
  const size_t n = ReceivedStreams::kMaxIdle + 10;
  for (uint64_t id = 1; id <= n; ++id) {
    ReceivedStream& stream = streams.Resume(kPeer, id, 0, Connection(1), &replaced);
    streams.Detach(stream, Connection(1), start + std::chrono::milliseconds(id));
  }
  streams.Expire(start + std::chrono::milliseconds(n + 1), 1h);
  CHECK(streams.size() == ReceivedStreams::kMaxIdle);
  // The ten oldest (ids 1..10) went: resuming one starts it anew.
  ReceivedStream& fresh = streams.Resume(kPeer, 5, 0, Connection(2), &replaced);
  CHECK(fresh.received == 0);
  CHECK(streams.size() == ReceivedStreams::kMaxIdle + 1);
}

}  // namespace
}  // namespace tocl::subsystem::tcp
