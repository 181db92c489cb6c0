// Multicast (tocl/multicast.h) on one host: runtimes in the test process
// and tocl-msg-worker processes, with a relay (MulticastOptions::relay_local)
// and without. Every receiver gets the message once, in its place among the
// sender's other messages to it; a receiver or relay that dies is reported
// and the others still get it; bad use is refused before anything is sent.
// (Across hosts, through the relays of other hosts: tests/netns.)
#include "tocl/multicast.h"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "daemon_harness.h"
#include "messaging_support.h"
#include "status_assertions.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr Tag kTag = 9;

// A sender and three receiving processes in the test process: the first
// (the relay: its process is the lowest) with two threads.
struct Fanout {
  Daemon daemon;
  std::unique_ptr<Runtime> sender;
  std::vector<std::unique_ptr<Runtime>> processes;
  Gid s;
  std::vector<Gid> receivers;  // in Gid order

  void Start(const std::string& name) {
    REQUIRE_OK(daemon.Start());
    sender = REQUIRE_VALUE(StartRuntime(daemon, name + "-sender"));
    s = REQUIRE_VALUE(sender->EnrollThread("s"));
    for (int p = 0; p < 3; ++p) {
      processes.push_back(REQUIRE_VALUE(StartRuntime(daemon, fmt::format("{}-r{}", name, p))));
      for (int t = 0; t < (p == 0 ? 2 : 1); ++t) {
        receivers.push_back(REQUIRE_VALUE(
            processes.back()->EnrollThread("r", Attributes{{"role", name + "-receiver"}})));
      }
    }
    REQUIRE(std::is_sorted(receivers.begin(), receivers.end()));
    // Registered, so a query finds them.
    REQUIRE_OK(sender->WaitForQuery("kind=thread and role=" + name + "-receiver", receivers.size(),
                                    seconds(10)));
  }
  Runtime& RuntimeOf(Gid thread) {
    for (auto& runtime : processes) {
      if (runtime->gid() == thread.process()) return *runtime;
    }
    FAIL("no runtime for " << thread.ToString());
    return *sender;
  }
};

void CheckAllDelivered(const MulticastResult& result, const std::vector<Gid>& receivers) {
  REQUIRE(result.receivers.size() == receivers.size());
  for (size_t i = 0; i < receivers.size(); ++i) {
    INFO(receivers[i].ToString() << ": " << result.receivers[i].status.ToString());
    CHECK(result.receivers[i].receiver == receivers[i]);
    CHECK(result.receivers[i].status.ok());
  }
  CHECK(result.all_delivered());
}

TEST_CASE("a multicast through a relay reaches every receiver once, short and long",
          "[integration][multicast]") {
  Fanout f;
  f.Start("fanout");
  const MulticastOptions relayed{.relay_local = true};
  for (size_t size : {size_t{100}, size_t{1} << 20}) {
    INFO(size << " bytes");
    const std::vector<std::byte> payload = PatternBytes(size, static_cast<uint32_t>(size));
    auto result = REQUIRE_VALUE(f.sender->Multicast(f.s, f.receivers, kTag, payload, relayed));
    CheckAllDelivered(result, f.receivers);
    // One host, one group: one copy from the sender, to the relay (the
    // lowest receiver's process), which carried it to every receiver.
    CHECK(result.copies_sent == 1);
    for (const MulticastOutcome& outcome : result.receivers) {
      CHECK(outcome.carried_by == f.receivers.front().process());
    }
    for (Gid r : f.receivers) {
      Buffer got = REQUIRE_VALUE(f.RuntimeOf(r).RecvFor(r, seconds(10), f.s, kTag));
      CHECK(got.source() == f.s);
      CHECK(got.tag() == kTag);
      REQUIRE(got.size() == payload.size());
      CHECK(std::memcmp(got.data(), payload.data(), payload.size()) == 0);
      // Once.
      CHECK(f.RuntimeOf(r).TryRecv(r, f.s, kTag).status().code() == StatusCode::kTryAgain);
    }
  }
}

TEST_CASE("without a relay on its own host the sender copies to each receiver itself",
          "[integration][multicast]") {
  Fanout f;
  f.Start("direct");
  const std::vector<std::byte> payload = PatternBytes(300, 1);
  auto result = REQUIRE_VALUE(f.sender->Multicast(f.s, f.receivers, kTag, payload));
  CheckAllDelivered(result, f.receivers);
  CHECK(result.copies_sent == f.receivers.size());
  for (const MulticastOutcome& outcome : result.receivers) {
    CHECK(outcome.carried_by == f.sender->gid());
  }
  for (Gid r : f.receivers) {
    Buffer got = REQUIRE_VALUE(f.RuntimeOf(r).RecvFor(r, seconds(10), f.s, kTag));
    CHECK(got.size() == payload.size());
  }
}

// The number each message carries: its index in the sender's sequence.
std::vector<std::byte> Numbered(uint32_t index, size_t size) {
  std::vector<std::byte> payload = PatternBytes(size, index);
  std::memcpy(payload.data(), &index, sizeof(index));
  return payload;
}
uint32_t IndexOf(const Buffer& message) {
  uint32_t index = 0;
  REQUIRE(message.size() >= sizeof(index));
  std::memcpy(&index, message.data(), sizeof(index));
  return index;
}

// Each of `f`'s receivers gets the sender's messages 0 .. count - 1, in
// that order, and nothing more.
void CheckReceivedInOrder(Fanout& f, uint32_t count) {
  for (Gid r : f.receivers) {
    for (uint32_t i = 0; i < count; ++i) {
      Buffer got = REQUIRE_VALUE(f.RuntimeOf(r).RecvFor(r, seconds(20), f.s, kTag));
      INFO(r.ToString() << " message " << i);
      REQUIRE(IndexOf(got) == i);
    }
    CHECK(f.RuntimeOf(r).TryRecv(r, f.s, kTag).status().code() == StatusCode::kTryAgain);
  }
}

TEST_CASE("sends and multicasts to the same receivers, interleaved, arrive in the order sent",
          "[integration][multicast]") {
  Fanout f;
  f.Start("order");
  const MulticastOptions relayed{.relay_local = true};
  const uint32_t count = static_cast<uint32_t>(MessageCount(120, 40));
  for (uint32_t i = 0; i < count; ++i) {
    // Every size class and long messages, relayed and direct in turn.
    const size_t size = i % 7 == 3 ? (size_t{100} << 10) : 8 + (i * 977) % 30000;
    const std::vector<std::byte> payload = Numbered(i, size);
    if (i % 3 == 1) {
      auto result = REQUIRE_VALUE(f.sender->Multicast(f.s, f.receivers, kTag, payload, relayed));
      CheckAllDelivered(result, f.receivers);
    } else {
      for (Gid r : f.receivers) REQUIRE_OK(f.sender->Send(f.s, r, kTag, payload));
    }
  }
  CheckReceivedInOrder(f, count);
}

TEST_CASE("a multicast to a query reaches the threads it matches now, the sender excluded",
          "[integration][multicast]") {
  Fanout f;
  f.Start("query");
  const std::vector<std::byte> payload = PatternBytes(64, 3);
  auto result =
      REQUIRE_VALUE(f.sender->Multicast(f.s, "kind=thread and role=query-receiver", kTag, payload));
  CheckAllDelivered(result, f.receivers);

  // A query that matches the sender too: the sender is left out.
  REQUIRE_OK(f.sender->LeaveThread(f.s));
  const Gid s2 = REQUIRE_VALUE(f.sender->EnrollThread("s2", {{"role", "query-receiver"}}));
  REQUIRE_OK(f.sender->WaitForQuery("kind=thread and role=query-receiver", 5, seconds(10)));
  result =
      REQUIRE_VALUE(f.sender->Multicast(s2, "kind=thread and role=query-receiver", kTag, payload));
  CheckAllDelivered(result, f.receivers);

  // A query that matches nothing is NotFound, saying so; nothing is sent.
  auto none = f.sender->Multicast(s2, "kind=thread and role=nobody-has-this", kTag, payload);
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().code() == StatusCode::kNotFound);
  CHECK(none.status().message().find("matches no thread") != std::string::npos);
  // Nor does one that matches only processes.
  none = f.sender->Multicast(s2, "kind=process and name=query-r0", kTag, payload);
  CHECK(none.status().code() == StatusCode::kNotFound);
  // A query that does not parse.
  auto bad = f.sender->Multicast(s2, "kind=", kTag, payload);
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  for (Gid r : f.receivers) {
    for (int n = 0; n < 2; ++n) REQUIRE_VALUE(f.RuntimeOf(r).RecvFor(r, seconds(10)));
    CHECK(f.RuntimeOf(r).TryRecv(r).status().code() == StatusCode::kTryAgain);
  }
}

TEST_CASE("bad use of multicast is refused with a clear error and sends nothing",
          "[integration][multicast]") {
  Fanout f;
  f.Start("misuse");
  const std::vector<std::byte> payload = PatternBytes(32, 4);
  auto refused = [&](std::vector<Gid> to, Tag tag, const std::string& words, Gid from = Gid()) {
    auto result = f.sender->Multicast(from.is_null() ? f.s : from, to, tag, payload);
    REQUIRE_FALSE(result.ok());
    INFO(result.status().ToString());
    CHECK(result.status().code() == StatusCode::kInvalidArgument);
    CHECK(result.status().message().find(words) != std::string::npos);
  };
  refused({}, kTag, "the list of receivers is empty");
  refused({f.receivers[0], f.s}, kTag, "the sender " + f.s.ToString() + " is among its receivers");
  refused({f.receivers[1], f.receivers[0], f.receivers[1]}, kTag,
          "receiver " + f.receivers[1].ToString() + " is in the list twice");
  refused({f.receivers[0], f.receivers[0].process()}, kTag, "is not a thread id");
  refused({f.receivers[0]}, kAnyTag, "kAnyTag");
  refused({Gid::Thread(f.receivers[0].process(), Gid::kMaxThread)}, kTag,
          "the runtime keeps for itself");
  refused({f.receivers[0]}, kTag, "is not a thread of this process", f.receivers[1]);
  for (Gid r : f.receivers) {
    CHECK(f.RuntimeOf(r).TryRecv(r).status().code() == StatusCode::kTryAgain);
  }
}

TEST_CASE("a receiver that does not exist is reported and the others still get the message",
          "[integration][multicast]") {
  Fanout f;
  f.Start("unknown");
  std::vector<Gid> to = f.receivers;
  // A thread index nobody enrolled in a running process, on the relay's
  // process and another's.
  const Gid ghost = Gid::Thread(f.receivers[2].process(), 4000);
  to.push_back(ghost);
  std::sort(to.begin(), to.end());
  for (bool relay : {true, false}) {
    INFO("relay_local " << relay);
    auto result = REQUIRE_VALUE(
        f.sender->Multicast(f.s, to, kTag, PatternBytes(50, 5), {.relay_local = relay}));
    REQUIRE(result.receivers.size() == to.size());
    CHECK(result.delivered() == f.receivers.size());
    for (const MulticastOutcome& outcome : result.receivers) {
      INFO(outcome.receiver.ToString() << ": " << outcome.status.ToString());
      CHECK(outcome.status.ok() == (outcome.receiver != ghost));
      if (outcome.receiver == ghost) CHECK(outcome.status.code() == StatusCode::kNotFound);
    }
    for (Gid r : f.receivers) REQUIRE_VALUE(f.RuntimeOf(r).RecvFor(r, seconds(10), f.s, kTag));
  }
}

// A tocl-msg-worker that receives nothing (role idle), one thread.
MsgWorker StartIdle(const Daemon& daemon, const std::string& name) {
  return REQUIRE_VALUE(MsgWorker::Start(daemon, MsgWorkerArgs("idle", name)));
}

TEST_CASE("a receiver that dies mid-multicast is reported and the others still get it",
          "[integration][multicast]") {
  Fanout f;
  f.Start("dying");
  // The worker's process is after the runtimes': the relay (the first
  // runtime) carries the message to it last.
  MsgWorker worker = StartIdle(f.daemon, "dying-worker");
  const Gid doomed = worker.threads().at(0);
  std::vector<Gid> to = f.receivers;
  to.push_back(doomed);
  // Stopped, it grants nothing: the relay's long send to it waits.
  REQUIRE_OK(worker.child().Signal(SIGSTOP));
  const std::vector<std::byte> payload = PatternBytes(size_t{1} << 20, 6);
  const auto start = std::chrono::steady_clock::now();
  auto pending = std::async(std::launch::async, [&] {
    return f.sender->Multicast(f.s, to, kTag, payload, {.relay_local = true});
  });
  // The others have it: the relay is on the doomed one now.
  for (Gid r : f.receivers) {
    Buffer got = REQUIRE_VALUE(f.RuntimeOf(r).RecvFor(r, seconds(20), f.s, kTag));
    CHECK(got.size() == payload.size());
  }
  REQUIRE(pending.wait_for(milliseconds(0)) == std::future_status::timeout);
  REQUIRE_VALUE(worker.child().Kill());
  auto result = REQUIRE_VALUE(pending.get());
  CHECK(std::chrono::steady_clock::now() - start < seconds(30));
  REQUIRE(result.receivers.size() == to.size());
  for (const MulticastOutcome& outcome : result.receivers) {
    INFO(outcome.receiver.ToString() << ": " << outcome.status.ToString());
    CHECK(outcome.status.ok() == (outcome.receiver != doomed));
  }
  CHECK(result.delivered() == f.receivers.size());
}

TEST_CASE("a relay that dies mid-multicast: the sender gives its receivers the message itself",
          "[integration][multicast]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  // The relay is the lowest receiving process: a worker, started first.
  MsgWorker relay = StartIdle(daemon, "doomed-relay");
  auto sender = REQUIRE_VALUE(StartRuntime(daemon, "relay-sender"));
  const Gid s = REQUIRE_VALUE(sender->EnrollThread("s"));
  auto others = REQUIRE_VALUE(StartRuntime(daemon, "relay-others"));
  std::vector<Gid> to{relay.threads().at(0)};
  for (int t = 0; t < 2; ++t) to.push_back(REQUIRE_VALUE(others->EnrollThread("r")));
  REQUIRE(relay.process() < others->gid());

  // Stopped, the relay answers nothing; killed, the directory says so and
  // the sender stops waiting for it (well before the timeout).
  REQUIRE_OK(relay.child().Signal(SIGSTOP));
  const auto start = std::chrono::steady_clock::now();
  auto pending = std::async(std::launch::async, [&] {
    return sender->Multicast(s, to, kTag, PatternBytes(200, 7),
                             {.timeout = seconds(60), .relay_local = true});
  });
  REQUIRE(pending.wait_for(milliseconds(200)) == std::future_status::timeout);
  REQUIRE_VALUE(relay.child().Kill());
  auto result = REQUIRE_VALUE(pending.get());
  CHECK(std::chrono::steady_clock::now() - start < seconds(30));
  REQUIRE(result.receivers.size() == 3);
  CHECK_FALSE(result.receivers[0].status.ok());  // the relay's own thread died with it
  for (size_t i = 1; i < 3; ++i) {
    INFO(to[i].ToString() << ": " << result.receivers[i].status.ToString());
    CHECK(result.receivers[i].status.ok());
    CHECK(result.receivers[i].carried_by == sender->gid());
    Buffer got = REQUIRE_VALUE(others->RecvFor(to[i], seconds(10), s, kTag));
    CHECK(got.size() == 200);
    CHECK(others->TryRecv(to[i]).status().code() == StatusCode::kTryAgain);
  }
}

TEST_CASE("a relay that does not answer in time: its receivers get it from the sender, once",
          "[integration][multicast]") {
  Fanout f;
  f.Start("slow");
  // A timeout no relay can meet: the sender sends to the receivers itself
  // while the relay carries the message too; short and long (a long fill
  // the relay carries is taken over, or answered "all here").
  uint32_t index = 0;
  for (size_t size : {size_t{500}, size_t{1} << 20}) {
    INFO(size << " bytes");
    const std::vector<std::byte> payload = Numbered(index, size);
    auto result = REQUIRE_VALUE(f.sender->Multicast(
        f.s, f.receivers, kTag, payload, {.timeout = milliseconds(0), .relay_local = true}));
    CheckAllDelivered(result, f.receivers);
    // A Send after it, which must come after it (and not wait behind a
    // number nobody fills).
    for (Gid r : f.receivers) REQUIRE_OK(f.sender->Send(f.s, r, kTag, Numbered(index + 1, 16)));
    // Whether from the relay or the sender, each receiver has it exactly once.
    for (Gid r : f.receivers) {
      INFO(r.ToString());
      Buffer got = REQUIRE_VALUE(f.RuntimeOf(r).RecvFor(r, seconds(20), f.s, kTag));
      REQUIRE(got.size() == payload.size());
      CHECK(std::memcmp(got.data(), payload.data(), payload.size()) == 0);
      Buffer after = REQUIRE_VALUE(f.RuntimeOf(r).RecvFor(r, seconds(20), f.s, kTag));
      CHECK(after.size() == 16);
      CHECK(IndexOf(after) == index + 1);
      CHECK(f.RuntimeOf(r).TryRecv(r, f.s, kTag).status().code() == StatusCode::kTryAgain);
    }
    index += 2;
  }
}

TEST_CASE("a relayed short multicast, then a direct long Send: each receiver gets them in order",
          "[integration][multicast]") {
  // Review finding 6's shape: the long start, sent directly, may arrive
  // before the relay's fill and wait behind it; it must then still be the
  // sender's (its grants go to the sender, not the relay).
  Fanout f;
  f.Start("shape");
  const uint32_t rounds = static_cast<uint32_t>(MessageCount(20, 8));
  for (uint32_t i = 0; i < rounds; ++i) {
    auto result = REQUIRE_VALUE(
        f.sender->Multicast(f.s, f.receivers, kTag, Numbered(2 * i, 100), {.relay_local = true}));
    CheckAllDelivered(result, f.receivers);
    for (Gid r : f.receivers) {
      REQUIRE_OK(f.sender->Send(f.s, r, kTag, Numbered(2 * i + 1, size_t{100} << 10)));
    }
  }
  CheckReceivedInOrder(f, 2 * rounds);
}

TEST_CASE("a receiver its relay cannot reach gets the message from the sender, in its place",
          "[integration][multicast]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  // The relay (the lowest receiving process) has shm only, the other
  // receiver tcp only: the relay reports an error for it (Unavailable, no
  // common network) although the sender (both networks) reaches it.
  auto relay = REQUIRE_VALUE(StartRuntime(daemon, "narrow-relay", "shm"));
  const Gid near = REQUIRE_VALUE(relay->EnrollThread("near"));
  auto sender = REQUIRE_VALUE(StartRuntime(daemon, "narrow-sender", "shm,tcp"));
  const Gid s = REQUIRE_VALUE(sender->EnrollThread("s"));
  auto far = REQUIRE_VALUE(StartRuntime(daemon, "narrow-far", "tcp"));
  const Gid far_thread = REQUIRE_VALUE(far->EnrollThread("far"));
  REQUIRE(relay->gid() < far->gid());
  const std::vector<Gid> to{near, far_thread};
  uint32_t index = 0;
  for (size_t size : {size_t{300}, size_t{1} << 20}) {
    INFO(size << " bytes");
    REQUIRE_OK(sender->Send(s, far_thread, kTag, Numbered(index, 16)));  // before it
    const std::vector<std::byte> payload = Numbered(index + 1, size);
    auto result = REQUIRE_VALUE(sender->Multicast(s, to, kTag, payload, {.relay_local = true}));
    REQUIRE_OK(sender->Send(s, far_thread, kTag, Numbered(index + 2, 16)));  // after it
    CheckAllDelivered(result, to);
    CHECK(result.receivers[0].carried_by == relay->gid());
    CHECK(result.receivers[1].carried_by == sender->gid());  // the relay could not
    for (uint32_t i = index; i < index + 3; ++i) {
      Buffer got = REQUIRE_VALUE(far->RecvFor(far_thread, seconds(20), s, kTag));
      CHECK(IndexOf(got) == i);
      if (i == index + 1) CHECK(got.size() == size);
    }
    CHECK(far->TryRecv(far_thread, s, kTag).status().code() == StatusCode::kTryAgain);
    Buffer got = REQUIRE_VALUE(relay->RecvFor(near, seconds(20), s, kTag));
    CHECK(got.size() == size);
    CHECK(relay->TryRecv(near, s, kTag).status().code() == StatusCode::kTryAgain);
    index += 3;
  }
}

TEST_CASE(
    "a relay that dies after delivering part of its group, in a long transfer: each live "
    "receiver gets it once, in order",
    "[integration][multicast]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  // The relay is the lowest receiving process (a worker, started first); it
  // carries to its own thread, then `done` (a lower process than `cut`),
  // then `cut`, whose grant waits for a RecvInto (its reassembly_cap is
  // below the message): the relay is killed while it waits there.
  MsgWorker doomed = StartIdle(daemon, "cut-relay");
  auto sender = REQUIRE_VALUE(StartRuntime(daemon, "cut-sender"));
  const Gid s = REQUIRE_VALUE(sender->EnrollThread("s"));
  auto done = REQUIRE_VALUE(StartRuntime(daemon, "cut-done"));
  const Gid done_thread = REQUIRE_VALUE(done->EnrollThread("done"));
  RuntimeOptions small = RuntimeOptionsFor(daemon, "cut-waits");
  small.reassembly_cap = size_t{256} << 10;
  auto cut = REQUIRE_VALUE(StartRuntime(small));
  const Gid cut_thread = REQUIRE_VALUE(cut->EnrollThread("cut"));
  REQUIRE(doomed.process() < done->gid());
  REQUIRE(done->gid() < cut->gid());
  const std::vector<Gid> to{doomed.threads().at(0), done_thread, cut_thread};

  const std::vector<std::byte> payload = Numbered(0, size_t{1} << 20);
  const uint64_t cut_heard = FramesReceived(*cut);
  auto pending = std::async(std::launch::async, [&] {
    return sender->Multicast(s, to, kTag, payload, {.timeout = seconds(60), .relay_local = true});
  });
  // `done` has it from the relay: the relay has moved on to `cut`.
  Buffer first = REQUIRE_VALUE(done->RecvFor(done_thread, seconds(20), s, kTag));
  CHECK(first.size() == payload.size());
  // `cut` has the relay's start (it waits there for a receive): the relay
  // dies midway through carrying it, not before. Only the sender (its
  // marker) and the relay (the start first) talk to `cut`. (A start
  // waiting for memory is not visible to Probe.)
  const auto until = std::chrono::steady_clock::now() + seconds(20);
  while (FramesReceived(*cut) < cut_heard + 2 && std::chrono::steady_clock::now() < until) {
    REQUIRE(pending.wait_for(milliseconds(5)) == std::future_status::timeout);
  }
  REQUIRE(FramesReceived(*cut) >= cut_heard + 2);
  REQUIRE(pending.wait_for(milliseconds(0)) == std::future_status::timeout);
  REQUIRE_VALUE(doomed.child().Kill());
  // The sender carries it to `cut` itself (in the relay's place: the
  // number is still open there); `done` answers the sender's second try
  // with "all here".
  std::vector<std::byte> out(payload.size());
  MessageInfo info = REQUIRE_VALUE(cut->RecvIntoFor(cut_thread, out, seconds(30), s, kTag));
  CHECK(info.size == payload.size());
  CHECK(out == payload);
  auto result = REQUIRE_VALUE(pending.get());
  REQUIRE(result.receivers.size() == 3);
  CHECK_FALSE(result.receivers[0].status.ok());  // died with the relay
  for (size_t i = 1; i < 3; ++i) {
    INFO(to[i].ToString() << ": " << result.receivers[i].status.ToString());
    CHECK(result.receivers[i].status.ok());
  }
  // Once, and the sender's next message comes after it.
  const std::vector<std::pair<Runtime*, Gid>> live{{done.get(), done_thread},
                                                   {cut.get(), cut_thread}};
  for (auto [runtime, thread] : live) {
    REQUIRE_OK(sender->Send(s, thread, kTag, Numbered(1, 16)));
    Buffer next = REQUIRE_VALUE(runtime->RecvFor(thread, seconds(20), s, kTag));
    CHECK(next.size() == 16);
    CHECK(IndexOf(next) == 1);
    CHECK(runtime->TryRecv(thread, s, kTag).status().code() == StatusCode::kTryAgain);
  }
}

}  // namespace
}  // namespace tocl::testing
