// Non-blocking requests (tocl/request.h) with real daemons and processes:
// many outstanding Irecvs of one thread (no thread each), WaitAny, WaitAll,
// Test and timeouts, posted receives' order against blocking ones, cancel
// racing arrivals (exactly once), Isend of long messages carried in the
// background, and bad use.
#include <dirent.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon_harness.h"
#include "messaging_payload.h"
#include "messaging_support.h"
#include "status_assertions.h"
#include "tocl/request.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// The threads of this process now.
size_t ThreadCount() {
  size_t count = 0;
  DIR* dir = opendir("/proc/self/task");
  REQUIRE(dir != nullptr);
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count;
}

uint64_t SeqOf(const Buffer& buffer) {
  return ReadPayloadHeader(buffer.span()).seq;
}

TEST_CASE("ten thousand outstanding Irecvs of one thread complete in post order, no thread each",
          "[integration][requests]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto receiver = REQUIRE_VALUE(StartRuntime(daemon, "many-receiver"));
  const Gid r = REQUIRE_VALUE(receiver->EnrollThread("r"));
  const uint64_t count = MessageCount(10'000, 2'000);
  // The thread's registration has reached the daemon (the gRPC client may
  // start a thread of its own for that, once).
  REQUIRE_OK(receiver->WaitForQuery("kind=thread and name=r", 1, seconds(10)));
  const size_t threads_before = ThreadCount();
  // A thread or two of the runtime's own may still come and go (gRPC's);
  // a thread per request would be thousands.
  const size_t threads_allowed = threads_before + 2;

  std::vector<Request> requests;
  requests.reserve(count);
  for (uint64_t i = 0; i < count; ++i)
    requests.push_back(REQUIRE_VALUE(receiver->Irecv(r, Gid(), 5)));
  CHECK(ThreadCount() <= threads_allowed);
  CHECK(requests.front().Test().code() == StatusCode::kTryAgain);

  // Another process sends them; each completes the oldest pending request.
  MsgWorker source = REQUIRE_VALUE(MsgWorker::Start(
      daemon, MsgWorkerArgs("source", "many-source").To({r}).Count(count).WithTag(5).Copy()));
  const Gid s = source.threads()[0];
  REQUIRE_OK(WaitAll(requests, seconds(120)));
  for (uint64_t i = 0; i < count; ++i) {
    INFO("request " << i);
    REQUIRE(requests[i].info().source == s);
    Buffer message = REQUIRE_VALUE(requests[i].TakeBuffer());
    REQUIRE(SeqOf(message) == i);
    REQUIRE(CheckPayload(message.span(), s, r).empty());
  }
  CHECK(ThreadCount() <= threads_allowed);
  CHECK(receiver->TryRecv(r).status().code() == StatusCode::kTryAgain);
  CHECK(source.Finish(seconds(30)).value_or(-1) == 0);
}

TEST_CASE("Test, Wait, WaitAny and WaitAll report pending requests and time out",
          "[integration][requests]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto [receiver, sender, r, s] = REQUIRE_VALUE(StartRuntimePair(daemon, "wait"));

  std::vector<Request> requests;
  for (Tag tag : {1u, 2u, 3u}) requests.push_back(REQUIRE_VALUE(receiver->Irecv(r, s, tag)));
  CHECK(requests[0].Test().code() == StatusCode::kTryAgain);
  const auto started = std::chrono::steady_clock::now();
  CHECK(requests[0].Wait(milliseconds(30)).code() == StatusCode::kDeadlineExceeded);
  CHECK(std::chrono::steady_clock::now() - started >= milliseconds(30));
  CHECK(WaitAny(requests, milliseconds(20)).status().code() == StatusCode::kDeadlineExceeded);
  Status all = WaitAll(requests, milliseconds(20));
  CHECK(all.code() == StatusCode::kDeadlineExceeded);
  CHECK_THAT(all.message(), Catch::Contains("3 of 3 requests are still pending"));

  // Tag 2 arrives: WaitAny says which, while the others are pending.
  REQUIRE_OK(sender->Send(s, r, 2, Bytes("two")));
  CHECK(REQUIRE_VALUE(WaitAny(requests, seconds(10))) == 1);
  CHECK(Text(REQUIRE_VALUE(requests[1].TakeBuffer())) == "two");
  requests[1] = Request();
  CHECK(WaitAny(requests, milliseconds(10)).status().code() == StatusCode::kDeadlineExceeded);
  all = WaitAll(requests, milliseconds(10));
  CHECK_THAT(all.message(), Catch::Contains("2 of 3 requests are still pending"));
  // Then 3 and 1: WaitAll returns once both are there.
  REQUIRE_OK(sender->Send(s, r, 3, Bytes("three")));
  REQUIRE_OK(sender->Send(s, r, 1, Bytes("one")));
  REQUIRE_OK(WaitAll(requests, seconds(10)));
  CHECK(REQUIRE_VALUE(WaitAny(requests, seconds(0))) == 0);  // the lowest complete
  CHECK(Text(REQUIRE_VALUE(requests[0].TakeBuffer())) == "one");
  CHECK(Text(REQUIRE_VALUE(requests[2].TakeBuffer())) == "three");
  for (Request& request : requests) request = Request();
  CHECK(WaitAny(requests, seconds(1)).status().code() == StatusCode::kInvalidArgument);
  REQUIRE_OK(WaitAll(requests, seconds(1)));  // nothing to wait for

  // Requests of two threads: WaitAny still sees either complete.
  const Gid r2 = REQUIRE_VALUE(receiver->EnrollThread("r2"));
  requests.clear();
  requests.push_back(REQUIRE_VALUE(receiver->Irecv(r, s, 7)));
  requests.push_back(REQUIRE_VALUE(receiver->Irecv(r2, s, 7)));
  REQUIRE_OK(sender->Send(s, r2, 7, Bytes("to r2")));
  CHECK(REQUIRE_VALUE(WaitAny(requests, seconds(10))) == 1);
  CHECK(requests[0].Test().code() == StatusCode::kTryAgain);
}

// How often the calling thread has gone to sleep (blocked) so far.
long VoluntarySwitches() {
  std::ifstream status("/proc/thread-self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with("voluntary_ctxt_switches:")) {
      return std::stol(line.substr(line.find(':') + 1));
    }
  }
  return -1;
}

TEST_CASE("WaitAny over requests of two threads sleeps until one completes, not in slices",
          "[integration][requests]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto receiver = REQUIRE_VALUE(StartRuntime(daemon, "across", "shm"));
  const Gid r = REQUIRE_VALUE(receiver->EnrollThread("r"));
  const Gid r2 = REQUIRE_VALUE(receiver->EnrollThread("r2"));
  // A thread of the same process sends: its Send hands the message to r2's
  // mailbox itself, so nothing but that mailbox (and whatever it tells)
  // learns of it. (A message from another process would reach the waiter
  // through the poller it may hold.)
  const Gid s = REQUIRE_VALUE(receiver->EnrollThread("local sender"));
  std::vector<Request> requests;
  requests.push_back(REQUIRE_VALUE(receiver->Irecv(r, s, 9)));  // never sent: pending
  requests.push_back(REQUIRE_VALUE(receiver->Irecv(r2, s, 8)));

  // Nothing comes for a second: after its first 100 ms (the eager phase of
  // every wait, which polls and hands the poll token back and forth: about
  // 60 sleeps) the waiter sleeps through it. A wait that looked again every
  // millisecond (as it once did across threads) went to sleep about 840
  // times in a second, and the scheduler's load does not add to the count.
  const long before = VoluntarySwitches();
  REQUIRE(before >= 0);
  CHECK(WaitAny(requests, seconds(1)).status().code() == StatusCode::kDeadlineExceeded);
  const long slept = VoluntarySwitches() - before;
  INFO("the waiting thread went to sleep " << slept << " times in a second");
  CHECK(slept < 150);

  // And it wakes when the message comes.
  std::thread sending([&] { (void)receiver->Send(s, r2, 8, Bytes("now")); });
  auto index = WaitAny(requests, seconds(10));
  sending.join();
  REQUIRE(REQUIRE_VALUE(std::move(index)) == 1);
  CHECK(Text(REQUIRE_VALUE(requests[1].TakeBuffer())) == "now");
  CHECK(requests[0].Test().code() == StatusCode::kTryAgain);
}

TEST_CASE("WaitAll reports how many requests failed, naming the first", "[integration][requests]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto [receiver, sender, r, s] = REQUIRE_VALUE(StartRuntimePair(daemon, "fail"));
  std::vector<std::byte> small(2);
  std::vector<Request> requests;
  requests.push_back(REQUIRE_VALUE(receiver->Irecv(r, s, 1)));
  requests.push_back(REQUIRE_VALUE(receiver->IrecvInto(r, small, s, 2)));
  REQUIRE_OK(sender->Send(s, r, 1, Bytes("ok")));
  REQUIRE_OK(sender->Send(s, r, 2, Bytes("too long")));
  Status all = WaitAll(requests, seconds(10));
  CHECK(all.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(all.message(), Catch::Contains("1 of 2 requests failed; the first, #1"));
  CHECK_THAT(all.message(), Catch::Contains("larger than the 2 byte buffer"));
  // The message IrecvInto could not take stays queued.
  CHECK(Text(REQUIRE_VALUE(receiver->RecvFor(r, seconds(1), s, 2))) == "too long");
}

TEST_CASE(
    "a posted Irecv takes its message before a later blocking Recv, and two complete in "
    "post order",
    "[integration][requests]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto [receiver, sender, r, s] = REQUIRE_VALUE(StartRuntimePair(daemon, "order"));
  Request first = REQUIRE_VALUE(receiver->Irecv(r));
  Request second = REQUIRE_VALUE(receiver->Irecv(r, s, 4));
  REQUIRE_OK(sender->Send(s, r, 4, Bytes("a")));
  REQUIRE_OK(sender->Send(s, r, 4, Bytes("b")));
  REQUIRE_OK(sender->Send(s, r, 4, Bytes("c")));
  // The blocking receive gets only what no request was posted for.
  Buffer third = REQUIRE_VALUE(receiver->RecvFor(r, seconds(10), s, 4));
  CHECK(Text(third) == "c");
  REQUIRE_OK(first.Wait(seconds(1)));
  REQUIRE_OK(second.Wait(seconds(1)));
  CHECK(Text(REQUIRE_VALUE(first.TakeBuffer())) == "a");
  CHECK(Text(REQUIRE_VALUE(second.TakeBuffer())) == "b");
}

TEST_CASE("cancel racing arrivals: each message completes one request or stays receivable, once",
          "[integration][requests]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto receiver = REQUIRE_VALUE(StartRuntime(daemon, "cancel-receiver"));
  const Gid r = REQUIRE_VALUE(receiver->EnrollThread("r"));
  const uint64_t count = MessageCount(5'000, 1'000);
  MsgWorker source = REQUIRE_VALUE(MsgWorker::Start(
      daemon, MsgWorkerArgs("source", "cancel-source").To({r}).Count(count).WithTag(9).Copy()));
  const Gid s = source.threads()[0];
  std::vector<int> seen(count, 0);
  uint64_t by_requests = 0, cancelled = 0, rounds = 0;
  auto record = [&](const Buffer& message) {
    const uint64_t seq = SeqOf(message);
    REQUIRE(seq < count);
    REQUIRE(CheckPayload(message.span(), s, r).empty());
    ++seen[seq];
  };
  const auto deadline = std::chrono::steady_clock::now() + seconds(120);
  while (by_requests < count && std::chrono::steady_clock::now() < deadline) {
    ++rounds;
    Request request = REQUIRE_VALUE(receiver->Irecv(r, s, 9));
    // Now and then give it a moment, so that arrivals meet the cancel.
    if (rounds % 3 == 0) (void)request.Test();
    Status cancel = request.Cancel();
    if (cancel.ok()) {
      ++cancelled;
      CHECK(request.Test().code() == StatusCode::kCancelled);
      CHECK(request.TakeBuffer().status().code() == StatusCode::kCancelled);
      CHECK(request.Cancel().code() == StatusCode::kFailedPrecondition);  // twice
      continue;
    }
    INFO(cancel.ToString());
    REQUIRE(cancel.code() == StatusCode::kFailedPrecondition);
    REQUIRE_OK(request.Test());
    record(REQUIRE_VALUE(request.TakeBuffer()));
    ++by_requests;
  }
  CHECK(source.Finish(seconds(30)).value_or(-1) == 0);
  // Nothing is left over, and nothing came twice or went missing.
  CHECK(receiver->TryRecv(r).status().code() == StatusCode::kTryAgain);
  for (uint64_t seq = 0; seq < count; ++seq) {
    INFO("seq " << seq);
    REQUIRE(seen[seq] == 1);
  }
  INFO(rounds << " rounds, " << cancelled << " cancelled");
  CHECK(cancelled > 0);
}

TEST_CASE("cancelling an IrecvInto while a long message lands in it leaves the message whole",
          "[integration][requests][long]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto [receiver, sender, r, s] = REQUIRE_VALUE(StartRuntimePair(daemon, "long-cancel", "tcp"));
  const size_t size = 64 * receiver->short_max_payload();
  constexpr int kMessages = 12;
  std::vector<std::vector<std::byte>> payloads;
  for (int i = 0; i < kMessages; ++i) payloads.push_back(PatternBytes(size, 100 + i));
  std::thread sending([&] {
    for (int i = 0; i < kMessages; ++i) (void)sender->Send(s, r, 3, payloads[i]);
  });
  // Cancel after 0..3 ms: before, during and after the fragments land.
  std::vector<int> seen(kMessages, 0);
  std::vector<std::byte> memory(size);
  int received = 0, cancelled = 0;
  auto take = [&](const std::vector<std::byte>& got) {
    const auto it = std::find(payloads.begin(), payloads.end(), got);
    REQUIRE(it != payloads.end());
    ++seen[it - payloads.begin()];
    ++received;
  };
  const auto deadline = std::chrono::steady_clock::now() + seconds(120);
  for (int round = 0; received < kMessages && std::chrono::steady_clock::now() < deadline;
       ++round) {
    std::fill(memory.begin(), memory.end(), std::byte{0});
    Request request = REQUIRE_VALUE(receiver->IrecvInto(r, memory, s, 3));
    (void)request.Wait(std::chrono::microseconds(1000 * (round % 4)));
    if (request.Cancel().ok()) {
      ++cancelled;
      continue;
    }
    REQUIRE_OK(request.Test());
    REQUIRE(request.info().size == size);
    take(memory);
  }
  sending.join();
  for (int i = 0; i < kMessages; ++i) {
    INFO("message " << i);
    CHECK(seen[i] == 1);
  }
  CHECK(receiver->TryProbe(r).status().code() == StatusCode::kTryAgain);
  INFO(cancelled << " cancelled");
}

TEST_CASE("Isend of long messages completes when the receiver holds them, keeping send order",
          "[integration][requests][long]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  for (const std::string networks : {"shm", "tcp"}) {
    DYNAMIC_SECTION("over " << networks) {
      auto [receiver, sender, r, s] = REQUIRE_VALUE(StartRuntimePair(daemon, "isend", networks));
      const size_t size = 20 * sender->short_max_payload() + 17;
      constexpr int kLong = 6;
      std::vector<std::vector<std::byte>> payloads;
      for (int i = 0; i < kLong; ++i) payloads.push_back(PatternBytes(size, 7 + i));
      // The route is up first: its lookup and connect may start threads of
      // their own (gRPC's), which are not the requests'.
      REQUIRE_OK(sender->Send(s, r, 2, Bytes("route")));
      CHECK(Text(REQUIRE_VALUE(receiver->RecvFor(r, seconds(20), s, 2))) == "route");
      const size_t threads_before = ThreadCount();
      std::vector<Request> sends;
      for (int i = 0; i < kLong; ++i)
        sends.push_back(REQUIRE_VALUE(sender->Isend(s, r, 1, payloads[i])));
      // A short message after them comes after them.
      Request last = REQUIRE_VALUE(sender->Isend(s, r, 1, Bytes("last")));
      REQUIRE_OK(last.Test());  // short: done when queued
      // One background thread carries them all (it is the only new one).
      CHECK(ThreadCount() <= threads_before + 1);
      for (int i = 0; i < kLong; ++i) {
        Buffer got = REQUIRE_VALUE(receiver->RecvFor(r, seconds(60), s, 1));
        REQUIRE(got.size() == size);
        CHECK(std::equal(payloads[i].begin(), payloads[i].end(), got.data()));
      }
      CHECK(Text(REQUIRE_VALUE(receiver->RecvFor(r, seconds(10), s, 1))) == "last");
      REQUIRE_OK(WaitAll(sends, seconds(60)));
      // Isend of Buffers: done at once.
      Buffer buffer = REQUIRE_VALUE(sender->GetBuffer(8));
      std::memcpy(buffer.data(), "buffer", 6);
      buffer.resize(6);
      Request by_ref = REQUIRE_VALUE(sender->Isend(s, r, 2, buffer));
      REQUIRE_OK(by_ref.Wait(seconds(0)));
      Request by_move = REQUIRE_VALUE(sender->Isend(s, r, 2, std::move(buffer)));
      REQUIRE_OK(by_move.Wait(seconds(0)));
      CHECK(Text(REQUIRE_VALUE(receiver->RecvFor(r, seconds(10), s, 2))) == "buffer");
      CHECK(Text(REQUIRE_VALUE(receiver->RecvFor(r, seconds(10), s, 2))) == "buffer");
    }
  }
}

TEST_CASE("bad use of requests gets clear errors", "[integration][requests]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto [receiver, sender, r, s] = REQUIRE_VALUE(StartRuntimePair(daemon, "bad"));

  SECTION("an empty or moved-from request") {
    Request empty;
    CHECK_FALSE(empty.valid());
    CHECK(empty.Wait(seconds(1)).code() == StatusCode::kInvalidArgument);
    CHECK(empty.Test().code() == StatusCode::kInvalidArgument);
    CHECK(empty.Cancel().code() == StatusCode::kInvalidArgument);
    CHECK(empty.TakeBuffer().status().code() == StatusCode::kInvalidArgument);
    Request posted = REQUIRE_VALUE(receiver->Irecv(r));
    Request moved = std::move(posted);
    CHECK_FALSE(posted.valid());  // NOLINT(bugprone-use-after-move): the point
    CHECK_THAT(posted.Wait(seconds(1)).message(), Catch::Contains("empty request"));
    CHECK(moved.Test().code() == StatusCode::kTryAgain);
  }
  SECTION("cancel twice, cancel a send, take twice, take from IrecvInto") {
    Request request = REQUIRE_VALUE(receiver->Irecv(r));
    REQUIRE_OK(request.Cancel());
    Status again = request.Cancel();
    CHECK(again.code() == StatusCode::kFailedPrecondition);
    CHECK_THAT(again.message(), Catch::Contains("cancelled already"));
    CHECK(request.Wait().code() == StatusCode::kCancelled);
    Request send = REQUIRE_VALUE(sender->Isend(s, r, 1, Bytes("x")));
    CHECK(send.Cancel().code() == StatusCode::kFailedPrecondition);
    Request got = REQUIRE_VALUE(receiver->Irecv(r));
    REQUIRE_OK(got.Wait(seconds(10)));
    REQUIRE_OK(got.TakeBuffer());
    CHECK(got.TakeBuffer().status().code() == StatusCode::kFailedPrecondition);
    CHECK(got.Cancel().code() == StatusCode::kFailedPrecondition);  // completed
    std::vector<std::byte> memory(8);
    Request into = REQUIRE_VALUE(receiver->IrecvInto(r, memory));
    CHECK(into.TakeBuffer().status().code() == StatusCode::kFailedPrecondition);
  }
  SECTION("receiving as a thread that is not ours, or has left") {
    CHECK(receiver->Irecv(s).status().code() == StatusCode::kInvalidArgument);
    CHECK(receiver->Irecv(Gid::Thread(receiver->gid(), 999)).status().code() ==
          StatusCode::kInvalidArgument);
    const Gid leaver = REQUIRE_VALUE(receiver->EnrollThread("leaver"));
    Request pending = REQUIRE_VALUE(receiver->Irecv(leaver));
    REQUIRE_OK(receiver->LeaveThread(leaver));
    Status left = pending.Wait(seconds(10));
    CHECK(left.code() == StatusCode::kFailedPrecondition);
    CHECK_THAT(left.message(), Catch::Contains("has left"));
    CHECK(receiver->Irecv(leaver).status().code() == StatusCode::kFailedPrecondition);
  }
  SECTION("shutdown completes pending requests, which may outlive the runtime") {
    std::vector<std::byte> memory(64);
    Request plain = REQUIRE_VALUE(receiver->Irecv(r));
    Request into = REQUIRE_VALUE(receiver->IrecvInto(r, memory));
    REQUIRE_OK(receiver->Shutdown(seconds(1)));
    CHECK(plain.Wait(seconds(1)).code() == StatusCode::kCancelled);
    receiver.reset();
    CHECK(into.Test().code() == StatusCode::kCancelled);
    CHECK(into.Cancel().code() == StatusCode::kFailedPrecondition);
  }
  SECTION("a long Isend pending at shutdown fails") {
    // The receiver has no memory for it and nobody receives: it waits.
    RuntimeOptions options = RuntimeOptionsFor(daemon, "no-memory");
    options.reassembly_cap = 1 << 20;
    auto tight = REQUIRE_VALUE(StartRuntime(options));
    const Gid t = REQUIRE_VALUE(tight->EnrollThread("t"));
    const auto payload = PatternBytes(4 << 20, 9);
    Request send = REQUIRE_VALUE(sender->Isend(s, t, 1, payload));
    CHECK(send.Wait(milliseconds(200)).code() == StatusCode::kDeadlineExceeded);
    // (Its flush may time out: the long message never left.)
    (void)sender->Shutdown(seconds(1));
    Status failed = send.Wait(seconds(10));
    CHECK(failed.code() == StatusCode::kUnavailable);
    CHECK_THAT(failed.message(), Catch::Contains("shutting down"));
  }
}

}  // namespace
}  // namespace tocl::testing
