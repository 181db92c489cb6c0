// Tag masks (tocl/tag_match.h) through every receive entry point, with real
// daemons and processes: a tocl-msg-worker process and runtimes in the test
// process send tagged messages, short and long, and the receiver selects
// them by (tag & mask).
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "daemon_harness.h"
#include "messaging_payload.h"
#include "messaging_support.h"
#include "status_assertions.h"
#include "tocl/tag_match.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// The top byte of a tag says the kind of message; the rest is free.
constexpr Tag kKindBits = 0xFF00'0000;
TagMatch Kind(Tag kind) {
  return TagMatch::Masked(kind << 24, kKindBits);
}

TEST_CASE("receives select messages by masked tag: Recv, TryRecv, Probe, RecvInto, Irecv",
          "[integration][tags]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto [receiver, sender, r, s] = REQUIRE_VALUE(StartRuntimePair(daemon, "tag"));

  // Kinds 1, 2, 2, 3, 2 with different low bits, in this order.
  const std::vector<Tag> tags = {0x0100'0007, 0x0200'0001, 0x0200'0002, 0x0300'0001, 0x0200'0003};
  for (size_t i = 0; i < tags.size(); ++i) {
    REQUIRE_OK(sender->Send(s, r, tags[i], Bytes("m" + std::to_string(i))));
  }
  // Every message is there once the last is (one sender: in order).
  REQUIRE_OK(receiver->Probe(r, seconds(10), s, tags.back()));

  // A mask nobody matches: nothing, and nothing is taken.
  CHECK(receiver->TryProbe(r, s, Kind(4)).status().code() == StatusCode::kTryAgain);
  CHECK(receiver->TryRecv(r, Gid(), Kind(4)).status().code() == StatusCode::kTryAgain);
  CHECK(receiver->RecvFor(r, milliseconds(20), s, Kind(4)).status().code() ==
        StatusCode::kDeadlineExceeded);
  // Probe describes the first kind-2 message and leaves it.
  MessageInfo info = REQUIRE_VALUE(receiver->Probe(r, seconds(1), s, Kind(2)));
  CHECK(info.tag == 0x0200'0001);
  CHECK(info.source == s);
  CHECK(info.size == 2);
  // Kind 2, in order, whatever the low bits: Recv, then RecvInto, then an
  // Irecv that finds its match queued.
  Buffer first = REQUIRE_VALUE(receiver->Recv(r, s, Kind(2)));
  CHECK(Text(first) == "m1");
  CHECK(first.tag() == 0x0200'0001);
  std::vector<std::byte> memory(16);
  info = REQUIRE_VALUE(receiver->RecvInto(r, memory, Gid(), Kind(2)));
  CHECK(info.tag == 0x0200'0002);
  CHECK(std::string(reinterpret_cast<const char*>(memory.data()), info.size) == "m2");
  Request request = REQUIRE_VALUE(receiver->Irecv(r, s.process(), Kind(2)));
  REQUIRE_OK(request.Wait(seconds(5)));
  CHECK(request.info().tag == 0x0200'0003);
  // An exact tag still means exactly that tag; kAnyTag anything.
  CHECK(receiver->TryRecv(r, s, 0x0300'0000).status().code() == StatusCode::kTryAgain);
  Buffer third = REQUIRE_VALUE(receiver->TryRecv(r, s, 0x0300'0001));
  CHECK(Text(third) == "m3");
  Buffer rest = REQUIRE_VALUE(receiver->TryRecv(r, s, kAnyTag));
  CHECK(Text(rest) == "m0");
  CHECK(receiver->TryProbe(r).status().code() == StatusCode::kTryAgain);
}

TEST_CASE("a posted Irecv with a mask completes with the first matching arrival",
          "[integration][tags]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto receiver = REQUIRE_VALUE(StartRuntime(daemon, "tag-receiver"));
  const Gid r = REQUIRE_VALUE(receiver->EnrollThread("r"));
  // Even tags only.
  Request even = REQUIRE_VALUE(receiver->Irecv(r, Gid(), TagMatch::Masked(0, 1)));
  // A separate process sends tags 1 (odd: not for the request).
  MsgWorker odd = REQUIRE_VALUE(MsgWorker::Start(
      daemon, MsgWorkerArgs("source", "odd").To({r}).Count(3).WithTag(1).Copy().Linger()));
  REQUIRE(odd.WaitForLine("done", milliseconds(30'000)));
  REQUIRE_OK(receiver->Probe(r, seconds(10), odd.threads()[0], 1));
  CHECK(even.Test().code() == StatusCode::kTryAgain);
  MsgWorker even_sender = REQUIRE_VALUE(MsgWorker::Start(
      daemon, MsgWorkerArgs("source", "even").To({r}).Count(1).WithTag(6).Copy().Linger()));
  REQUIRE_OK(even.Wait(seconds(10)));
  Buffer got = REQUIRE_VALUE(even.TakeBuffer());
  CHECK(got.tag() == 6);
  CHECK(got.source() == even_sender.threads()[0]);
  CHECK(CheckPayload(got.span(), even_sender.threads()[0], r).empty());
  // The odd ones are still queued, in order.
  for (uint64_t seq = 0; seq < 3; ++seq) {
    Buffer message =
        REQUIRE_VALUE(receiver->RecvFor(r, seconds(10), Gid(), TagMatch::Masked(1, 1)));
    CHECK(ReadPayloadHeader(message.span()).seq == seq);
  }
  CHECK(odd.Finish(seconds(10)).value_or(-1) == 0);
  CHECK(even_sender.Finish(seconds(10)).value_or(-1) == 0);
}

TEST_CASE(
    "long messages are selected by masked tag, whole (Recv) and in place (RecvInto, "
    "IrecvInto)",
    "[integration][tags][long]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  for (const std::string networks : {"shm", "tcp"}) {
    DYNAMIC_SECTION("over " << networks) {
      auto [receiver, sender, r, s] = REQUIRE_VALUE(StartRuntimePair(daemon, "long-tag", networks));
      const size_t size = 3 * receiver->short_max_payload() + 123;
      const auto a = PatternBytes(size, 1);
      const auto b = PatternBytes(size, 2);
      const auto c = PatternBytes(size, 3);
      // Posted before anything is sent: `c` (kind 5) lands in `memory`.
      std::vector<std::byte> memory(size);
      Request into = REQUIRE_VALUE(receiver->IrecvInto(r, memory, s, Kind(5)));
      REQUIRE_OK(sender->Send(s, r, 0x0400'0001, a));  // kind 4
      REQUIRE_OK(sender->Send(s, r, 0x0600'0002, b));  // kind 6
      REQUIRE_OK(sender->Send(s, r, 0x0500'0003, c));  // kind 5
      REQUIRE_OK(into.Wait(seconds(30)));
      CHECK(into.info().tag == 0x0500'0003);
      CHECK(into.info().size == size);
      CHECK(memory == c);
      // Kind 6 by a probe, then into memory; kind 4 whole.
      MessageInfo info = REQUIRE_VALUE(receiver->Probe(r, seconds(30), s, Kind(6)));
      CHECK(info.size == size);
      std::vector<std::byte> copy(size);
      info = REQUIRE_VALUE(receiver->RecvIntoFor(r, copy, seconds(30), s, Kind(6)));
      CHECK(info.tag == 0x0600'0002);
      CHECK(copy == b);
      CHECK(receiver->TryRecv(r, s, Kind(6)).status().code() == StatusCode::kTryAgain);
      Buffer whole = REQUIRE_VALUE(receiver->RecvFor(r, seconds(30), s, Kind(4)));
      CHECK(whole.tag() == 0x0400'0001);
      REQUIRE(whole.size() == size);
      CHECK(std::equal(a.begin(), a.end(), whole.data()));
    }
  }
}

}  // namespace
}  // namespace tocl::testing
