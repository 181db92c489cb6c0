// Packed messages (tocl/packed_message.h) with real daemons and processes:
// a message of typed values, inline and by-reference byte ranges read back
// in order over shm and tcp (the long range landing in the reader's memory),
// the pieces invisible to the application's receives, a header handler
// placing 4 MiB bodies from another process with no copy, and bad use:
// unpacking past the end, type and length mismatches, a header function
// that throws, fails or gives too small a destination, a writer dropped
// before End, a sender killed mid-stream.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon_harness.h"
#include "messaging_payload.h"
#include "messaging_support.h"
#include "shared_state.h"
#include "status_assertions.h"
#include "tocl/packed_message.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

enum class Shape : uint16_t { kSquare = 3, kRound = 9 };

TEST_CASE("a packed message's values and byte ranges come back in order over shm and tcp",
          "[integration][packed]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  for (const std::string networks : {"shm", "tcp"}) {
    DYNAMIC_SECTION("over " << networks) {
      auto [receiver, sender, r, s] = REQUIRE_VALUE(StartRuntimePair(daemon, "packed", networks));
      const std::vector<std::byte> small = PatternBytes(100, 1);
      const std::vector<std::byte> medium = PatternBytes(40 * 1024, 2);      // by reference, short
      const std::vector<std::byte> body = PatternBytes(size_t{4} << 20, 3);  // by reference, long
      Status sent;
      size_t messages = 0;
      std::thread sending([&] {
        sent = [&]() -> Status {
          TOCL_ASSIGN_OR_RETURN(PackedWriter out, sender->BeginPacked(s, r, 7));
          TOCL_RETURN_IF_ERROR(out.Pack(uint32_t{1024}));
          TOCL_RETURN_IF_ERROR(out.Pack(-2.5));
          TOCL_RETURN_IF_ERROR(out.Pack(Shape::kRound));
          TOCL_RETURN_IF_ERROR(out.Pack(true));
          TOCL_RETURN_IF_ERROR(out.PackBytes(small));
          TOCL_RETURN_IF_ERROR(out.PackBytes(medium));
          TOCL_RETURN_IF_ERROR(out.PackBytes(body));
          TOCL_RETURN_IF_ERROR(out.Pack(int64_t{-7}));
          TOCL_RETURN_IF_ERROR(out.End());
          messages = out.messages_sent();
          return Status::Ok();
        }();
      });
      PackedReader in = REQUIRE_VALUE(receiver->RecvPacked(r, s, 7));
      CHECK(in.info().source == s);
      CHECK(in.info().tag == 7);
      CHECK(REQUIRE_VALUE(in.Unpack<uint32_t>()) == 1024);
      CHECK(REQUIRE_VALUE(in.Unpack<double>()) == -2.5);
      CHECK(REQUIRE_VALUE(in.Unpack<Shape>()) == Shape::kRound);
      CHECK(REQUIRE_VALUE(in.Unpack<bool>()));
      std::vector<std::byte> got_small(small.size());
      CHECK(REQUIRE_VALUE(in.UnpackBytes(got_small)) == small.size());
      CHECK(got_small == small);
      PackedPiece next = REQUIRE_VALUE(in.Peek());
      CHECK(next.index == 5);
      CHECK(next.type == PackedType::kBytes);
      CHECK(next.length == medium.size());
      CHECK(next.by_reference);
      std::vector<std::byte> got_medium(medium.size());
      CHECK(REQUIRE_VALUE(in.UnpackBytes(got_medium)) == medium.size());
      CHECK(got_medium == medium);
      std::vector<std::byte> got_body(body.size() + 10);  // a larger span takes it too
      CHECK(REQUIRE_VALUE(in.UnpackBytes(got_body)) == body.size());
      CHECK(std::equal(body.begin(), body.end(), got_body.begin()));
      CHECK(REQUIRE_VALUE(in.Unpack<int64_t>()) == -7);
      CHECK(in.at_end());
      // The long range went from the sender's memory into ours: no copy
      // through library memory on the way.
      CHECK(in.bytes_in_place() == body.size());
      sending.join();
      REQUIRE_OK(sent);
      CHECK(messages == 5);  // header, medium, the segment after, body, the last segment
      // Nothing of it is left for a receive of any tag.
      CHECK(receiver->TryRecv(r).status().code() == StatusCode::kTryAgain);
    }
  }
}

TEST_CASE("unpacking past the end or with the wrong type or length gets a clear error",
          "[integration][packed]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto [receiver, sender, r, s] = REQUIRE_VALUE(StartRuntimePair(daemon, "packed-bad"));
  PackedWriter out = REQUIRE_VALUE(sender->BeginPacked(s, r, 3));
  REQUIRE_OK(out.Pack(1.5));
  REQUIRE_OK(out.PackBytes(PatternBytes(64, 4)));
  REQUIRE_OK(out.End());
  CHECK(out.End().code() == StatusCode::kFailedPrecondition);
  CHECK(out.Pack(1).code() == StatusCode::kFailedPrecondition);

  PackedReader in = REQUIRE_VALUE(receiver->RecvPacked(r, s, 3));
  Result<uint32_t> wrong = in.Unpack<uint32_t>();
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.status().code() == StatusCode::kInvalidArgument);
  CHECK(wrong.status().message() == "piece 0: expected u32 (4 bytes), found f64 (8 bytes)");
  std::vector<std::byte> bytes(64);
  CHECK(in.UnpackBytes(bytes).status().code() == StatusCode::kInvalidArgument);
  // A failed unpack leaves the reader where it was.
  CHECK(REQUIRE_VALUE(in.Unpack<double>()) == 1.5);
  Result<double> not_a_value = in.Unpack<double>();
  CHECK(not_a_value.status().message() ==
        "piece 1: expected f64 (8 bytes), found bytes (64 bytes)");
  std::vector<std::byte> too_small(10);
  Result<size_t> cut = in.UnpackBytes(too_small);
  CHECK(cut.status().code() == StatusCode::kInvalidArgument);
  CHECK(cut.status().message() == "piece 1: a 64 byte range does not fit the 10 bytes given");
  CHECK(REQUIRE_VALUE(in.UnpackBytes(bytes)) == 64);
  Result<int> past = in.Unpack<int>();
  CHECK(past.status().code() == StatusCode::kOutOfRange);
  CHECK(past.status().message() == "piece 2: past the end of the message (2 pieces)");
  CHECK(in.UnpackBytes(bytes).status().code() == StatusCode::kOutOfRange);

  // A message that is not packed is refused; an empty reader and writer too.
  REQUIRE_OK(sender->Send(s, r, 4, Bytes("plain")));
  Buffer plain = REQUIRE_VALUE(receiver->RecvFor(r, seconds(10), s, 4));
  Result<PackedReader> opened = receiver->OpenPacked(r, std::move(plain));
  CHECK(opened.status().code() == StatusCode::kDataLoss);
  CHECK(MessageContains(opened.status(), "not a packed message"));
  CHECK(PackedReader().Unpack<int>().status().code() == StatusCode::kFailedPrecondition);
  CHECK(PackedWriter().Pack(1).code() == StatusCode::kFailedPrecondition);
  CHECK(sender->BeginPacked(s, r, kAnyTag).status().code() == StatusCode::kInvalidArgument);
  CHECK(sender->BeginPacked(s, Gid::Process(1, 2), 1).status().code() ==
        StatusCode::kInvalidArgument);
}

TEST_CASE("a segment that fills streams before End and the reader follows it across segments",
          "[integration][packed]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto [receiver, sender, r, s] = REQUIRE_VALUE(StartRuntimePair(daemon, "packed-many"));
  // 60,000 values: about 600 KB of items, ten segments.
  constexpr uint32_t kValues = 60'000;
  PackedWriter out = REQUIRE_VALUE(sender->BeginPacked(s, r, 5));
  for (uint32_t i = 0; i < kValues; ++i) {
    REQUIRE_OK(out.Pack(uint64_t{i} * 3));
    // The header left once the first segment was full, before End.
    if (i == kValues / 2) CHECK(out.messages_sent() >= 1);
  }
  // The header is receivable while the writer is still open.
  PackedReader in = REQUIRE_VALUE(receiver->RecvPacked(r, s, 5));
  CHECK(REQUIRE_VALUE(in.Unpack<uint64_t>()) == 0);
  REQUIRE_OK(out.End());
  CHECK(out.messages_sent() >= 8);
  for (uint32_t i = 1; i < kValues; ++i) {
    Result<uint64_t> value = in.Unpack<uint64_t>();
    REQUIRE(value.ok());
    REQUIRE(*value == uint64_t{i} * 3);
  }
  CHECK(in.at_end());
}

TEST_CASE("a writer dropped before End makes its reader fail instead of wait",
          "[integration][packed]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto [receiver, sender, r, s] = REQUIRE_VALUE(StartRuntimePair(daemon, "packed-dropped"));
  {
    PackedWriter out = REQUIRE_VALUE(sender->BeginPacked(s, r, 6));
    REQUIRE_OK(out.Pack(uint8_t{1}));
    REQUIRE_OK(out.PackBytes(PatternBytes(40 * 1024, 5)));  // the header leaves here
  }
  PackedReader in = REQUIRE_VALUE(receiver->RecvPacked(r, s, 6));
  CHECK(REQUIRE_VALUE(in.Unpack<uint8_t>()) == 1);
  std::vector<std::byte> bytes(40 * 1024);
  CHECK(REQUIRE_VALUE(in.UnpackBytes(bytes)) == bytes.size());
  Result<uint8_t> next = in.Unpack<uint8_t>();
  CHECK(next.status().code() == StatusCode::kFailedPrecondition);
  CHECK(MessageContains(next.status(), "the sender dropped the packed message before End"));
  // A writer dropped before anything left sends nothing.
  { PackedWriter unused = REQUIRE_VALUE(sender->BeginPacked(s, r, 6)); }
  REQUIRE_OK(sender->Send(s, r, 6, Bytes("after")));
  CHECK(Text(REQUIRE_VALUE(receiver->RecvFor(r, seconds(10), s, 6))) == "after");
}

// Packed messages from a tocl-msg-worker ("packed" role), placed by a
// header handler into memory of the test's.
struct Placed {
  std::map<uint64_t, std::vector<std::byte>> bodies;  // by message index
  std::vector<PackedCompletion> completions;
};

TEST_CASE("a header handler places 4 MiB bodies from another process with no copy",
          "[integration][packed][handlers]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  for (const std::string networks : {"shm", "tcp"}) {
    DYNAMIC_SECTION("over " << networks) {
      auto receiver = REQUIRE_VALUE(StartRuntime(daemon, "placing", networks));
      constexpr uint64_t kMessages = 4;
      constexpr size_t kBody = size_t{4} << 20;
      Shared shared;
      Placed placed;
      std::string problems;
      HandlerRegistration handler = REQUIRE_VALUE(receiver->RegisterPackedHandler(
          Gid(), Gid(), 9,
          [&](PackedReader& header) -> Result<PackedPlacement> {
            uint64_t values[kPackedHeaderValues];
            for (uint64_t& value : values) {
              TOCL_ASSIGN_OR_RETURN(value, header.Unpack<uint64_t>());
            }
            std::span<std::byte> memory;
            shared.With([&] {
              std::vector<std::byte>& body = placed.bodies[values[0]];
              body.resize(values[1]);
              memory = body;
              for (uint32_t v = 0; v < kPackedHeaderValues; ++v) {
                if (values[v] != PackedHeaderValue(values[0], v, values[1])) problems += "header; ";
              }
            });
            return PackedPlacement{{memory}};
          },
          [&](const PackedCompletion& done) {
            shared.With([&] { placed.completions.push_back(done); });
          },
          {.ordered = true, .thread_name = "placer"}));

      MsgWorker worker = REQUIRE_VALUE(MsgWorker::Start(daemon, MsgWorkerArgs("packed", "packer")
                                                                    .Subsystems(networks)
                                                                    .To({handler.thread})
                                                                    .Count(kMessages)
                                                                    .WithTag(9)));
      REQUIRE(shared.WaitFor([&] { return placed.completions.size() >= kMessages; }, seconds(120)));
      CHECK(worker.Finish(seconds(30)).value_or(-1) == 0);
      shared.With([&] {
        CHECK(problems.empty());
        for (const PackedCompletion& done : placed.completions) {
          INFO(done.status.ToString());
          CHECK(done.status.ok());
          CHECK(done.handler == handler.id);
          CHECK(done.info.source.process() == worker.process());
          REQUIRE(done.placed.size() == 1);
          CHECK(done.placed[0] == kBody);
          // Straight into the memory the header function gave.
          CHECK(done.bytes_in_place == kBody);
          CHECK(done.bytes_copied == 0);
        }
        for (uint64_t i = 0; i < kMessages; ++i) {
          const std::vector<std::byte>& body = placed.bodies[i];
          REQUIRE(body.size() == kBody);
          size_t bad = 0;
          for (size_t j = 0; j < kBody; ++j) bad += body[j] != PackedBodyByte(i, j);
          CHECK(bad == 0);
        }
      });
      REQUIRE_OK(receiver->CancelHandler(handler.id));
      CHECK(receiver->TryRecv(handler.thread).status().code() == StatusCode::kTryAgain);
    }
  }
}

TEST_CASE(
    "a header function that throws, fails or gives too small a destination is reported "
    "and the handler goes on",
    "[integration][packed][handlers]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto [receiver, sender, r, s] = REQUIRE_VALUE(StartRuntimePair(daemon, "packed-faults"));
  Shared shared;
  std::vector<PackedCompletion> completions;
  std::vector<std::byte> memory(1 << 20);
  HandlerRegistration handler = REQUIRE_VALUE(receiver->RegisterPackedHandler(
      r, s, 2,
      [&](PackedReader& header) -> Result<PackedPlacement> {
        TOCL_ASSIGN_OR_RETURN(uint32_t what, header.Unpack<uint32_t>());
        if (what == 0) throw std::runtime_error("no room for this one");
        if (what == 1) return ResourceExhausted("the application says no");
        if (what == 2) return PackedPlacement{{std::span(memory).first(1000)}};
        if (what == 3) {
          // Reading the body from the header function: it is not there yet.
          Result<size_t> more = header.UnpackBytes(memory);
          if (more.ok()) return Internal("read the body from the header function");
          return more.status();
        }
        return PackedPlacement{{memory}};
      },
      [&](const PackedCompletion& done) { shared.With([&] { completions.push_back(done); }); },
      {.ordered = true}));
  const std::vector<std::byte> body = PatternBytes(256 * 1024, 6);
  std::thread sending([&] {
    for (uint32_t what = 0; what < 5; ++what) {
      PackedWriter out = *sender->BeginPacked(s, r, 2);
      (void)out.Pack(what);
      (void)out.PackBytes(body);  // its sender waits until the receiver takes (or drops) it
      if (what == 3) (void)out.Pack(uint32_t{7});
      (void)out.End();
    }
  });
  REQUIRE(shared.WaitFor([&] { return completions.size() >= 5; }, seconds(60)));
  sending.join();
  shared.With([&] {
    CHECK(completions[0].status.code() == StatusCode::kInternal);
    CHECK(
        MessageContains(completions[0].status, "the header function threw: no room for this one"));
    CHECK(completions[1].status.code() == StatusCode::kResourceExhausted);
    CHECK(completions[2].status.code() == StatusCode::kInvalidArgument);
    CHECK(MessageContains(completions[2].status,
                          "piece 1: a 262144 byte range does not fit the 1000 bytes given"));
    CHECK(completions[3].status.code() == StatusCode::kFailedPrecondition);
    CHECK(MessageContains(completions[3].status, "piece 1 is not in the header segment"));
    REQUIRE_OK(completions[4].status);
    REQUIRE(completions[4].placed.size() == 1);
    CHECK(completions[4].placed[0] == body.size());
    CHECK(std::equal(body.begin(), body.end(), memory.begin()));
  });
  REQUIRE_OK(receiver->CancelHandler(handler.id));
  // The failed messages' bodies were received and dropped: nothing is left.
  CHECK(receiver->TryRecv(r).status().code() == StatusCode::kTryAgain);
  CHECK(receiver->RegisterPackedHandler(r, s, 2, nullptr, [](const PackedCompletion&) {})
            .status()
            .code() == StatusCode::kInvalidArgument);
}

TEST_CASE("a sender killed mid-stream fails the header handler's message, nothing hangs",
          "[integration][packed][handlers]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto receiver = REQUIRE_VALUE(StartRuntime(daemon, "orphaned"));
  Shared shared;
  std::vector<PackedCompletion> completions;
  std::vector<std::byte> memory(size_t{4} << 20);
  std::optional<MsgWorker> worker;
  bool started = false;  // `worker` is set (the header may come first)
  HandlerRegistration handler = REQUIRE_VALUE(receiver->RegisterPackedHandler(
      Gid(), Gid(), 9,
      [&](PackedReader& header) -> Result<PackedPlacement> {
        for (uint32_t v = 0; v < kPackedHeaderValues; ++v) {
          TOCL_RETURN_IF_ERROR(header.Unpack<uint64_t>().status());
        }
        if (!shared.WaitFor([&] { return started; }, seconds(30))) {
          return DeadlineExceeded("the worker did not start");
        }
        // The sender is in PackBytes, its body waiting for this receive:
        // kill it now (closing its stdin), and place the body once it is gone.
        (void)worker->Finish(seconds(30));
        return PackedPlacement{{memory}};
      },
      [&](const PackedCompletion& done) { shared.With([&] { completions.push_back(done); }); }));
  MsgWorkerArgs args("packed", "doomed");
  args.To({handler.thread}).Count(1).WithTag(9);
  args.extra = {"--kill-on-stdin-close"};
  Result<MsgWorker> started_worker = MsgWorker::Start(daemon, args);
  REQUIRE_OK(started_worker.status());
  shared.With([&] {
    worker.emplace(std::move(*started_worker));
    started = true;
  });
  REQUIRE(shared.WaitFor([&] { return !completions.empty(); }, seconds(60)));
  shared.With([&] {
    const Status& status = completions[0].status;
    INFO(status.ToString());
    CHECK(status.code() == StatusCode::kUnavailable);
    CHECK(MessageContains(status, "exited"));
    CHECK(completions[0].placed == std::vector<uint64_t>{0});
  });
  REQUIRE_OK(receiver->CancelHandler(handler.id));
}

}  // namespace
}  // namespace tocl::testing
