// Receive-side semantics, with runtimes in the test process (each Runtime
// is an enrollment of its own): which queued message a (source, tag)
// selector takes first, per-pair order among matching messages (MPI's
// non-overtaking rule), timed and non-blocking receives, and probes that
// leave messages where they are.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon_harness.h"
#include "messaging_support.h"
#include "status_assertions.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

// Three processes on one host: the receiver's (r, and r2 that sends to r
// from inside the same process), A (a1, a2) and B (b1).
struct Cluster {
  std::unique_ptr<Runtime> receiver, a, b;
  Gid r, r2, a1, a2, b1;
};

void StartCluster(const Daemon& daemon, Cluster& c) {
  c.receiver = REQUIRE_VALUE(StartRuntime(daemon, "receiver"));
  c.a = REQUIRE_VALUE(StartRuntime(daemon, "sender-a"));
  c.b = REQUIRE_VALUE(StartRuntime(daemon, "sender-b"));
  c.r = REQUIRE_VALUE(c.receiver->EnrollThread("r"));
  c.r2 = REQUIRE_VALUE(c.receiver->EnrollThread("r2"));
  c.a1 = REQUIRE_VALUE(c.a->EnrollThread("a1"));
  c.a2 = REQUIRE_VALUE(c.a->EnrollThread("a2"));
  c.b1 = REQUIRE_VALUE(c.b->EnrollThread("b1"));
  REQUIRE(c.r.process() == c.receiver->gid());
  REQUIRE(c.a1.process() == c.a->gid());
  REQUIRE(c.a1.host() == c.b1.host());
}

// Every message TryRecv hands `self` for the selector, in order, as text.
std::vector<std::string> Drain(Runtime& runtime, Gid self, Gid source, Tag tag) {
  std::vector<std::string> texts;
  for (;;) {
    auto message = runtime.TryRecv(self, source, tag);
    if (!message.ok()) {
      INFO("TryRecv -> " << message.status().ToString());
      CHECK(message.status().code() == StatusCode::kTryAgain);
      return texts;
    }
    texts.push_back(Text(*message));
  }
}

double Millis(steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

TEST_CASE("a receive selector takes the earliest matching message, by thread, process, host or any",
          "[integration][msg]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  Cluster c;
  StartCluster(daemon, c);

  struct Queued {
    Runtime* runtime;
    Gid from;
    Tag tag;
    std::string text;
  };
  // Every (source, tag) pair differs, so a probe for it sees that message.
  const std::vector<Queued> queue = {
      {c.a.get(), c.a1, 1, "m1 a1/1"}, {c.b.get(), c.b1, 2, "m2 b1/2"},
      {c.a.get(), c.a2, 1, "m3 a2/1"}, {c.a.get(), c.a1, 2, "m4 a1/2"},
      {c.b.get(), c.b1, 1, "m5 b1/1"}, {c.receiver.get(), c.r2, 3, "m6 r2/3"},
  };
  // Sends the queue one message at a time, each once the previous one has
  // arrived, so that arrival order is send order.
  auto fill = [&] {
    for (const Queued& m : queue) {
      REQUIRE_OK(m.runtime->Send(m.from, c.r, m.tag, Bytes(m.text)));
      auto probe = c.receiver->Probe(c.r, seconds(10), m.from, m.tag);
      INFO("waiting for " << m.text);
      REQUIRE_OK(probe);
      CHECK(probe->source == m.from);
      CHECK(probe->tag == m.tag);
      CHECK(probe->size == m.text.size());
    }
  };
  const Gid another_host = Gid::Host(c.r.host_index() + 1);
  const Gid absent_thread = Gid::Thread(c.a->gid(), 999);

  struct Case {
    std::string selector;
    Gid source;
    Tag tag;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"any source, any tag",
       Gid(),
       kAnyTag,
       {"m1 a1/1", "m2 b1/2", "m3 a2/1", "m4 a1/2", "m5 b1/1", "m6 r2/3"}},
      {"any source, tag 1", Gid(), 1, {"m1 a1/1", "m3 a2/1", "m5 b1/1"}},
      {"thread a1, any tag", c.a1, kAnyTag, {"m1 a1/1", "m4 a1/2"}},
      {"thread a1, tag 2", c.a1, 2, {"m4 a1/2"}},
      {"thread a2, tag 2", c.a2, 2, {}},
      {"process A, any tag", c.a->gid(), kAnyTag, {"m1 a1/1", "m3 a2/1", "m4 a1/2"}},
      {"process A, tag 1", c.a->gid(), 1, {"m1 a1/1", "m3 a2/1"}},
      {"process B, tag 1", c.b->gid(), 1, {"m5 b1/1"}},
      {"the receiver's own process", c.receiver->gid(), kAnyTag, {"m6 r2/3"}},
      {"the host, tag 2", c.r.host(), 2, {"m2 b1/2", "m4 a1/2"}},
      {"the host, any tag",
       c.r.host(),
       kAnyTag,
       {"m1 a1/1", "m2 b1/2", "m3 a2/1", "m4 a1/2", "m5 b1/1", "m6 r2/3"}},
      {"another host", another_host, kAnyTag, {}},
      {"a thread that never enrolled", absent_thread, kAnyTag, {}},
      {"any source, a tag nobody sent", Gid(), 77, {}},
  };
  std::vector<std::string> all;
  for (const Queued& m : queue) all.push_back(m.text);

  for (const Case& test : cases) {
    INFO("selector: " << test.selector);
    fill();
    std::vector<std::string> taken;
    if (!test.expected.empty()) {
      // Probe and a blocking Recv agree on the first match.
      auto probe = REQUIRE_VALUE(c.receiver->TryProbe(c.r, test.source, test.tag));
      auto first = REQUIRE_VALUE(c.receiver->Recv(c.r, test.source, test.tag));
      CHECK(probe.source == first.source());
      CHECK(probe.tag == first.tag());
      CHECK(probe.size == first.size());
      taken.push_back(Text(first));
    }
    for (std::string& text : Drain(*c.receiver, c.r, test.source, test.tag)) {
      taken.push_back(std::move(text));
    }
    CHECK(taken == test.expected);
    // Whatever the selector did not match is still there, in arrival order.
    std::vector<std::string> rest;
    for (const std::string& text : all) {
      if (std::find(test.expected.begin(), test.expected.end(), text) == test.expected.end()) {
        rest.push_back(text);
      }
    }
    CHECK(Drain(*c.receiver, c.r, Gid(), kAnyTag) == rest);
  }
}

TEST_CASE("messages from one thread to another are received in send order among those matched",
          "[integration][msg]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  Cluster c;
  StartCluster(daemon, c);
  constexpr int kPerSender = 300;

  // a1 alternates tags 1 and 2, a2 and b1 send tag 1; all at once, from
  // three threads, while r receives.
  std::mutex errors_mutex;
  std::vector<std::string> errors;  // guarded by errors_mutex
  auto send_all = [&](Runtime& runtime, Gid from, bool alternate) {
    for (int i = 0; i < kPerSender; ++i) {
      const Tag tag = alternate ? 1 + (i % 2) : 1;
      const std::string text = from.ToString() + " " + std::to_string(i);
      Status sent = runtime.Send(from, c.r, tag, Bytes(text));
      if (!sent.ok()) {
        // Catch2 assertions belong to the test's thread: report afterwards.
        std::lock_guard lock(errors_mutex);
        errors.push_back("send " + text + ": " + sent.ToString());
        return;
      }
    }
  };
  std::vector<std::jthread> senders;
  senders.emplace_back([&] { send_all(*c.a, c.a1, true); });
  senders.emplace_back([&] { send_all(*c.a, c.a2, false); });
  senders.emplace_back([&] { send_all(*c.b, c.b1, false); });

  auto index_of = [](const Buffer& message) {
    const std::string text = Text(message);
    return std::stoi(text.substr(text.find(' ') + 1));
  };
  // First a1's tag-2 messages only: the odd ones, in order, though the
  // even ones from a1 and everything from a2 and b1 arrive around them.
  for (int i = 1; i < kPerSender; i += 2) {
    auto message = REQUIRE_VALUE(c.receiver->RecvFor(c.r, seconds(20), c.a1, 2));
    REQUIRE(message.source() == c.a1);
    REQUIRE(message.tag() == 2);
    REQUIRE(index_of(message) == i);
  }
  // Then any source and any tag: per sender, what is left, in order.
  std::map<Gid, std::vector<int>> rest;
  for (int n = 0; n < kPerSender / 2 + 2 * kPerSender; ++n) {
    auto message = REQUIRE_VALUE(c.receiver->RecvFor(c.r, seconds(20)));
    rest[message.source()].push_back(index_of(message));
  }
  senders.clear();
  CHECK(errors.empty());
  CHECK(c.receiver->TryRecv(c.r).status().code() == StatusCode::kTryAgain);
  std::vector<int> evens, everything;
  for (int i = 0; i < kPerSender; ++i) {
    if (i % 2 == 0) evens.push_back(i);
    everything.push_back(i);
  }
  CHECK(rest[c.a1] == evens);
  CHECK(rest[c.a2] == everything);
  CHECK(rest[c.b1] == everything);
}

TEST_CASE("RecvFor and Probe time out after about their timeout, TryRecv and TryProbe at once",
          "[integration][msg]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  Cluster c;
  StartCluster(daemon, c);
  const auto timeout = milliseconds(300);
  // Generous: a loaded 2-core machine under a sanitizer wakes late.
  const auto slack = seconds(3);

  // A message that no selector below matches waits in the queue meanwhile.
  REQUIRE_OK(c.a->Send(c.a1, c.r, 9, Bytes("not for these selectors")));
  REQUIRE_OK(c.receiver->Probe(c.r, seconds(10), c.a1, 9));

  struct Selector {
    std::string name;
    Gid source;
    Tag tag;
  };
  for (const Selector& s :
       {Selector{"an empty thread", Gid(), kAnyTag}, Selector{"a silent source", c.b1, kAnyTag},
        Selector{"a tag nobody sent", c.a1, 10}}) {
    INFO(s.name);
    const Gid self = s.source.is_null() ? c.r2 : c.r;
    auto start = steady_clock::now();
    auto received = c.receiver->RecvFor(self, timeout, s.source, s.tag);
    auto elapsed = steady_clock::now() - start;
    INFO("RecvFor took " << Millis(elapsed) << " ms -> " << received.status().ToString());
    CHECK(received.status().code() == StatusCode::kDeadlineExceeded);
    CHECK(elapsed >= timeout);
    CHECK(elapsed < timeout + slack);

    start = steady_clock::now();
    auto probed = c.receiver->Probe(self, timeout, s.source, s.tag);
    elapsed = steady_clock::now() - start;
    INFO("Probe took " << Millis(elapsed) << " ms -> " << probed.status().ToString());
    CHECK(probed.status().code() == StatusCode::kDeadlineExceeded);
    CHECK(elapsed >= timeout);
    CHECK(elapsed < timeout + slack);

    start = steady_clock::now();
    CHECK(c.receiver->TryRecv(self, s.source, s.tag).status().code() == StatusCode::kTryAgain);
    CHECK(c.receiver->TryProbe(self, s.source, s.tag).status().code() == StatusCode::kTryAgain);
    CHECK(steady_clock::now() - start < slack);
  }
  // A zero timeout is a poll.
  CHECK(c.receiver->RecvFor(c.r2, nanoseconds(0)).status().code() == StatusCode::kDeadlineExceeded);
  // The non-matching message is still there, untouched.
  auto kept = REQUIRE_VALUE(c.receiver->TryRecv(c.r));
  CHECK(Text(kept) == "not for these selectors");
}

TEST_CASE("a receive that is waiting returns as soon as a matching message arrives",
          "[integration][msg]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  Cluster c;
  StartCluster(daemon, c);

  for (const bool same_process : {false, true}) {
    INFO((same_process ? "from the same process" : "from another process"));
    Runtime& sender = same_process ? *c.receiver : *c.a;
    const Gid from = same_process ? c.r2 : c.a1;
    Result<Buffer> got = Internal("not received");
    steady_clock::duration waited{};
    std::jthread receiver([&] {
      auto start = steady_clock::now();
      got = c.receiver->RecvFor(c.r, seconds(30), from, 4);
      waited = steady_clock::now() - start;
    });
    // A non-matching message first: it must not wake the receiver for good.
    REQUIRE_OK(sender.Send(from, c.r, 5, Bytes("wrong tag")));
    REQUIRE_OK(sender.Send(from, c.r, 4, Bytes("wake up")));
    receiver.join();
    REQUIRE_OK(got);
    CHECK(Text(*got) == "wake up");
    CHECK(got->source() == from);
    CHECK(got->destination() == c.r);
    CHECK(waited < seconds(10));
    CHECK(Text(REQUIRE_VALUE(c.receiver->TryRecv(c.r, from, 5))) == "wrong tag");
  }
}

TEST_CASE("Probe and TryProbe report a message without taking it", "[integration][msg]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  Cluster c;
  StartCluster(daemon, c);

  REQUIRE_OK(c.b->Send(c.b1, c.r, 42, Bytes("probe me")));
  auto info = REQUIRE_VALUE(c.receiver->Probe(c.r, seconds(10)));
  CHECK(info.source == c.b1);
  CHECK(info.tag == 42);
  CHECK(info.size == 8);
  // Again, with every selector that matches it: the same message.
  for (Gid source : {Gid(), c.b1, c.b->gid(), c.r.host()}) {
    for (Tag tag : {kAnyTag, Tag{42}}) {
      auto again = REQUIRE_VALUE(c.receiver->TryProbe(c.r, source, tag));
      CHECK(again.source == c.b1);
      CHECK(again.tag == 42);
      auto timed = REQUIRE_VALUE(c.receiver->Probe(c.r, milliseconds(1), source, tag));
      CHECK(timed.size == 8);
    }
  }
  CHECK(c.receiver->TryProbe(c.r, c.a1).status().code() == StatusCode::kTryAgain);
  CHECK(c.receiver->TryProbe(c.r, Gid(), 43).status().code() == StatusCode::kTryAgain);
  CHECK(c.receiver->TryProbe(c.r2).status().code() == StatusCode::kTryAgain);
  // Receiving takes it: once.
  auto message = REQUIRE_VALUE(c.receiver->TryRecv(c.r, c.b1, 42));
  CHECK(Text(message) == "probe me");
  CHECK(message.source() == c.b1);
  CHECK(message.tag() == 42);
  CHECK(c.receiver->TryProbe(c.r).status().code() == StatusCode::kTryAgain);
  CHECK(c.receiver->TryRecv(c.r).status().code() == StatusCode::kTryAgain);
}

TEST_CASE("a negative timeout is a poll and the largest one waits for the message",
          "[integration][msg]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  Cluster c;
  StartCluster(daemon, c);

  auto start = steady_clock::now();
  CHECK(c.receiver->RecvFor(c.r, nanoseconds(-5)).status().code() == StatusCode::kDeadlineExceeded);
  CHECK(c.receiver->Probe(c.r, nanoseconds(-5)).status().code() == StatusCode::kDeadlineExceeded);
  CHECK(steady_clock::now() - start < seconds(3));

  // nanoseconds::max() must not overflow into "already past".
  for (const bool probe : {false, true}) {
    INFO((probe ? "Probe" : "RecvFor") << "(nanoseconds::max())");
    Status outcome = Internal("not returned");
    std::jthread receiver([&] {
      outcome = probe ? c.receiver->Probe(c.r, nanoseconds::max(), c.a1).status()
                      : c.receiver->RecvFor(c.r, nanoseconds::max(), c.a1).status();
    });
    // Whether the receiver is already waiting or not, it must get this.
    Status sent = c.a->Send(c.a1, c.r, 1, Bytes("eventually"));
    CHECK_OK(sent);
    if (!sent.ok()) (void)c.receiver->Shutdown();  // or the receiver waits for ever
    receiver.join();
    CHECK_OK(outcome);
    if (probe) CHECK(Text(REQUIRE_VALUE(c.receiver->TryRecv(c.r))) == "eventually");
  }
  CHECK(c.receiver->TryRecv(c.r).status().code() == StatusCode::kTryAgain);
}

}  // namespace
}  // namespace tocl::testing
