// Packed messages (tocl/packed_message.h) that fail mid-stream, with real
// daemons and processes, by the two paths packed_test.cc does not reach:
// a reader whose sender's exit this runtime no longer remembers (its
// ExitedSenders table keeps the last 4096 exits), which learns it from the
// directory; and a by-reference range whose send failed, in whose place
// the reader receives the writer's abort segment.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon_harness.h"
#include "messaging_payload.h"
#include "messaging_support.h"
#include "shared_state.h"
#include "status_assertions.h"
#include "tocl/exit_notice.h"
#include "tocl/packed_message.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

// More thread exits than ExitedSenders::kRemembered (4096), so that none
// from before them is left in a runtime's table.
constexpr size_t kFloodThreads = 4200;

TEST_CASE(
    "a reader whose runtime forgot its killed sender's exit learns it from the directory and "
    "fails",
    "[integration][packed]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto receiver = REQUIRE_VALUE(StartRuntime(daemon, "forgetful"));
  const Gid r = REQUIRE_VALUE(receiver->EnrollThread("r"));
  MsgWorkerArgs args("packed", "forgotten");
  args.To({r}).Count(1).WithTag(9);
  args.extra = {"--kill-on-stdin-close"};
  MsgWorker worker = REQUIRE_VALUE(MsgWorker::Start(daemon, args));
  const Gid sender = worker.threads().at(0);

  // The header; its sender is now in PackBytes, its 4 MiB body waiting for
  // our receive. Kill it there (it SIGKILLs itself when stdin closes).
  Buffer header = REQUIRE_VALUE(receiver->RecvFor(r, seconds(30), sender, 9));
  PackedReader in = REQUIRE_VALUE(receiver->OpenPacked(r, std::move(header)));
  for (uint32_t v = 0; v < kPackedHeaderValues; ++v) REQUIRE_OK(in.Unpack<uint64_t>().status());
  Shared shared;
  bool sender_gone = false;
  REQUIRE_OK(
      receiver->Notify(sender, [&](const ExitNotice&) { shared.With([&] { sender_gone = true; }); })
          .status());
  (void)worker.Finish(seconds(30));
  REQUIRE(shared.WaitFor([&] { return sender_gone; }, seconds(30)));
  const Entity dead = REQUIRE_VALUE(receiver->Lookup(sender));
  REQUIRE(dead.state == EntityState::kExited);
  INFO("the sender's exit reason: " << dead.exit_reason);

  // A flood of exits after the sender's pushes it out of the receiver's
  // table: another process enrolls and leaves kFloodThreads threads, then
  // exits. Its exit's notice comes by the change stream after theirs, so
  // once it is here the receiver's table has taken them all.
  {
    auto flooder = REQUIRE_VALUE(StartRuntime(daemon, "flooder"));
    bool flood_seen = false;
    REQUIRE_OK(receiver
                   ->Notify(flooder->gid(),
                            [&](const ExitNotice&) { shared.With([&] { flood_seen = true; }); })
                   .status());
    std::vector<Gid> threads;
    threads.reserve(kFloodThreads);
    for (size_t i = 0; i < kFloodThreads; ++i) {
      Result<Gid> thread = flooder->EnrollThread("flood");
      REQUIRE(thread.ok());
      threads.push_back(*thread);
    }
    size_t left = 0;
    for (Gid thread : threads) left += flooder->LeaveThread(thread).ok() ? 1 : 0;
    REQUIRE(left == kFloodThreads);
    REQUIRE_OK(flooder->Shutdown());
    flooder.reset();
    REQUIRE(shared.WaitFor([&] { return flood_seen; }, seconds(120)));
  }

  // The body never comes, and the table cannot say why: the reader asks
  // the directory after a second of silence. (With that fallback disabled
  // it waits for ever; the test then ends the wait by leaving the thread,
  // and fails.)
  std::vector<std::byte> body(size_t{4} << 20);
  Status got;
  bool done = false;
  steady_clock::duration took{};
  std::thread reading([&] {
    const auto start = steady_clock::now();
    Status status = in.UnpackBytes(body).status();
    shared.With([&] {
      got = status;
      took = steady_clock::now() - start;
      done = true;
    });
  });
  const bool ended = shared.WaitFor([&] { return done; }, seconds(30));
  if (!ended) (void)receiver->LeaveThread(r);  // unblocks the reader: fail, not hang
  reading.join();
  INFO(got.ToString());
  REQUIRE(ended);
  CHECK(got.code() == StatusCode::kUnavailable);
  CHECK(MessageContains(got, "its sender " + sender.ToString() +
                                 " exited before piece 16 of the packed message (tag 9) arrived (" +
                                 dead.exit_reason + ")"));
  // Not from the table (that answers at the first look): from the directory,
  // asked once the wait had heard nothing for a second.
  CHECK(took >= seconds(1));
}

// Resumes a SIGSTOPped process when it goes (a test that fails while the
// process is stopped must not leave it so).
struct Stopped {
  pid_t pid;
  bool stopped = false;
  bool Stop() { return stopped = ::kill(pid, SIGSTOP) == 0; }
  void Continue() {
    if (stopped) stopped = ::kill(pid, SIGCONT) != 0;
  }
  ~Stopped() { Continue(); }
};

TEST_CASE(
    "a by-reference range whose send failed: its reader receives the abort segment in its place "
    "and fails with the writer's reason over shm and tcp",
    "[integration][packed]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  for (const std::string networks : {"shm", "tcp"}) {
    DYNAMIC_SECTION("over " << networks) {
      MsgWorker reader = REQUIRE_VALUE(MsgWorker::Start(
          daemon, MsgWorkerArgs("packed-read", "stopped").Subsystems(networks).WithTag(9)));
      const Gid r = reader.threads().at(0);
      // A sender that gives a long message up after a second of silence.
      RuntimeOptions options = RuntimeOptionsFor(daemon, "giving-up", networks);
      options.fragment_timeout = milliseconds(250);
      options.partial_timeout = milliseconds(1000);
      auto sender = REQUIRE_VALUE(StartRuntime(options));
      const Gid s = REQUIRE_VALUE(sender->EnrollThread("s"));

      // The header leaves in PackBytes, then the body's start; the body
      // waits for the reader's receive, which the reader posts only after
      // the go. Stopped meanwhile, the reader's process answers no probe:
      // the send fails, the writer is dropped and sends its abort segment,
      // which the pair order delivers before the go.
      const std::vector<std::byte> body = PatternBytes(size_t{4} << 20, 8);
      Shared shared;
      std::optional<Status> packed;
      std::thread writing([&] {
        Status status = [&]() -> Status {
          TOCL_ASSIGN_OR_RETURN(PackedWriter out, sender->BeginPacked(s, r, 9));
          for (uint32_t v = 0; v < kPackedHeaderValues; ++v) {
            TOCL_RETURN_IF_ERROR(out.Pack(uint64_t{v}));
          }
          return out.PackBytes(body);
        }();
        shared.With([&] { packed = status; });
      });
      Stopped reader_process{reader.pid()};
      const bool header = reader.WaitForLine("header", seconds(30));
      const bool stopped = header && reader_process.Stop();
      const bool gave_up =
          stopped && shared.WaitFor([&] { return packed.has_value(); }, seconds(30));
      if (gave_up) CHECK_OK(sender->Send(s, r, 10, Bytes("go")));
      reader_process.Continue();
      writing.join();  // a send still waiting ends when the reader gives up (30 s)
      INFO(reader.Output());
      REQUIRE(header);
      REQUIRE(stopped);
      REQUIRE(gave_up);
      INFO("PackBytes: " << packed->ToString());
      CHECK(packed->code() == StatusCode::kUnavailable);
      CHECK(MessageContains(*packed, "partial_timeout"));

      REQUIRE(reader.WaitForLine("left", seconds(30)));
      const std::string got = reader.Line("body").value_or("");
      INFO("the reader: " << got);
      // FailedPrecondition naming the writer's reason, not a DataLoss of a
      // range that came short or the long message's own abort.
      CHECK(reader.LastValue("next", "by_reference") == 1u);  // so UnpackBytes received it
      CHECK(got.find("error failed precondition: piece 16: the sender dropped the packed message "
                     "before End (unavailable: ") != std::string::npos);
      CHECK(got.find("partial_timeout") != std::string::npos);
      // The abort segment was the range's message: nothing is left queued
      // (a queued message holds a pool buffer, as the header did while it
      // was read), for a receive of the application or a packed reader.
      INFO("the reader: left " << reader.Line("left").value_or(""));
      CHECK(reader.LastValue("header", "in_use") >= 1u);
      CHECK(reader.LastValue("left", "receivable") == 0u);
      CHECK(reader.LastValue("left", "in_use") == 0u);
      CHECK(reader.Finish(seconds(30)).value_or(-1) == 0);
    }
  }
}

}  // namespace
}  // namespace tocl::testing
