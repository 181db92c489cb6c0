// Message handlers (tocl/handler.h) with real daemons and processes:
// dispatch of another process's messages, unordered calls at once against
// ordered ones one at a time in order, a handler that replies, handlers of
// two runtimes of one process, a blocked handler with a backlog holding up
// only itself, a handler that throws, cancel racing arrivals (each message
// handled once or still receivable), cancel waiting for a running call (and
// from inside one, racing other calls), bad use, destroying the runtime
// from a call, and shutdown with calls running.
#include <signal.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/logger.h"
#include "daemon_harness.h"
#include "messaging_payload.h"
#include "messaging_support.h"
#include "shared_state.h"
#include "status_assertions.h"
#include "tocl/handler.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

uint64_t SeqOf(const Buffer& buffer) {
  return ReadPayloadHeader(buffer.span()).seq;
}

TEST_CASE("a handler runs on runtime threads for each message from another process, in order",
          "[integration][handlers]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto receiver = REQUIRE_VALUE(StartRuntime(daemon, "handled"));
  const uint64_t count = MessageCount(2'000, 400);
  Shared shared;
  std::vector<uint64_t> seqs;
  std::string problems;
  Gid source_thread;
  HandlerRegistration registration = REQUIRE_VALUE(receiver->RegisterHandler(
      Gid(), Gid(), 4,
      [&](HandlerContext& call) {
        shared.With([&] {
          if (call.info.tag != 4 || call.info.size != call.message.size()) problems += "info; ";
          if (call.message.source() != call.info.source) problems += "source; ";
          std::string bad = CheckPayload(call.message.span(), call.info.source, call.self);
          if (!bad.empty()) problems += bad + "; ";
          seqs.push_back(SeqOf(call.message));
        });
      },
      {.ordered = true, .thread_name = "handled-thread"}));
  CHECK(registration.id != 0);
  CHECK(registration.thread.process() == receiver->gid());
  // The runtime enrolled the handler's thread with the directory.
  REQUIRE_OK(receiver->WaitForQuery("kind=thread and name=handled-thread", 1, seconds(10)));

  MsgWorker source = REQUIRE_VALUE(MsgWorker::Start(
      daemon,
      MsgWorkerArgs("source", "handled-source").To({registration.thread}).Count(count).WithTag(4)));
  REQUIRE(shared.WaitFor([&] { return seqs.size() >= count; }, seconds(120)));
  CHECK(source.Finish(seconds(30)).value_or(-1) == 0);
  shared.With([&] {
    CHECK(problems.empty());
    REQUIRE(seqs.size() == count);
    for (uint64_t i = 0; i < count; ++i) REQUIRE(seqs[i] == i);  // ordered: as sent
  });
  REQUIRE_OK(receiver->CancelHandler(registration.id));
  // Nothing was left for a receive.
  CHECK(receiver->TryRecv(registration.thread).status().code() == StatusCode::kTryAgain);
}

TEST_CASE("unordered calls run at once, an ordered handler's never overlap and keep order",
          "[integration][handlers]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto [receiver, sender, r, s] = REQUIRE_VALUE(StartRuntimePair(daemon, "concurrency"));
  Shared shared;

  SECTION("unordered: up to max_concurrent_calls at once") {
    int active = 0, most = 0, calls = 0;
    HandlerRegistration handler = REQUIRE_VALUE(
        receiver->RegisterHandler(r, s, 1,
                                  [&](HandlerContext&) {
                                    shared.With([&] {
                                      ++active;
                                      most = std::max(most, active);
                                    });
                                    // Stay until a second call runs alongside (or give up): a pool
                                    // that ran one call at a time would never get there.
                                    (void)shared.WaitFor([&] { return most >= 3; }, seconds(5));
                                    shared.With([&] {
                                      --active;
                                      ++calls;
                                    });
                                  },
                                  {.max_concurrent_calls = 3}));
    for (int i = 0; i < 12; ++i) REQUIRE_OK(sender->Send(s, r, 1, Bytes("x")));
    REQUIRE(shared.WaitFor([&] { return calls == 12; }, seconds(60)));
    shared.With([&] {
      CHECK(most == 3);  // never more than asked
    });
    REQUIRE_OK(receiver->CancelHandler(handler.id));
  }

  SECTION("ordered: one call at a time, in the order sent") {
    int active = 0, overlaps = 0;
    std::vector<int> order;
    HandlerRegistration handler = REQUIRE_VALUE(
        receiver->RegisterHandler(r, s, 1,
                                  [&](HandlerContext& call) {
                                    shared.With([&] {
                                      if (++active > 1) ++overlaps;
                                    });
                                    // Widen the window in which an overlapping call would show.
                                    std::this_thread::sleep_for(std::chrono::microseconds(300));
                                    shared.With([&] {
                                      --active;
                                      order.push_back(std::stoi(Text(call.message)));
                                    });
                                  },
                                  {.ordered = true}));
    const int count = 200;
    for (int i = 0; i < count; ++i) REQUIRE_OK(sender->Send(s, r, 1, Bytes(std::to_string(i))));
    REQUIRE(shared.WaitFor([&] { return order.size() == count; }, seconds(60)));
    shared.With([&] {
      CHECK(overlaps == 0);
      for (int i = 0; i < count; ++i) REQUIRE(order[i] == i);
    });
    REQUIRE_OK(receiver->CancelHandler(handler.id));
  }
}

TEST_CASE("a handler replies: another process's pings are echoed", "[integration][handlers]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto echo = REQUIRE_VALUE(StartRuntime(daemon, "handler-echo"));
  Runtime* runtime = echo.get();
  std::atomic<int> failed_sends{0};
  HandlerRegistration handler =
      REQUIRE_VALUE(echo->RegisterHandler(Gid(), Gid(), kAnyTag, [&](HandlerContext& call) {
        // The received buffer goes back as it is.
        if (!runtime->Send(call.self, call.info.source, call.info.tag, std::move(call.message))
                 .ok()) {
          ++failed_sends;
        }
      }));
  const uint64_t count = MessageCount(2'000, 300);
  MsgWorker ping = REQUIRE_VALUE(MsgWorker::Start(
      daemon, MsgWorkerArgs("ping", "handler-ping").Peer("handler-echo", 1).Count(count)));
  REQUIRE(ping.WaitForLine("done", seconds(120)));
  INFO(ping.Output());
  CHECK(ping.Finish(seconds(30)).value_or(-1) == 0);
  CHECK(failed_sends == 0);
  REQUIRE_OK(echo->CancelHandler(handler.id));
}

TEST_CASE("a handler may send, receive, register and cancel handlers", "[integration][handlers]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto [receiver, sender, r, s] = REQUIRE_VALUE(StartRuntimePair(daemon, "reentrant"));
  Runtime& rt = *receiver;
  Shared shared;
  std::string log;
  HandlerRegistration outer = REQUIRE_VALUE(rt.RegisterHandler(r, s, 1, [&](HandlerContext& call) {
    // Receive the second half on the same thread (a different tag).
    Result<Buffer> second = rt.RecvFor(call.self, seconds(10), s, 2);
    // Register an inner handler on a thread of its own, send it a message,
    // wait for it, cancel it.
    std::atomic<bool> inner_ran{false};
    Result<HandlerRegistration> inner = rt.RegisterHandler(
        Gid(), call.self, 3, [&](HandlerContext&) { shared.With([&] { inner_ran = true; }); },
        {.ordered = true});
    Status sent = inner.ok() ? rt.Send(call.self, inner->thread, 3, Bytes("in")) : inner.status();
    const bool ran = sent.ok() && shared.WaitFor([&] { return inner_ran.load(); }, seconds(10));
    Status cancelled = inner.ok() ? rt.CancelHandler(inner->id) : inner.status();
    shared.With([&] {
      log = Text(call.message) + "+" + (second.ok() ? Text(*second) : second.status().ToString()) +
            (ran ? " inner ran" : " inner did not run: " + sent.ToString()) +
            (cancelled.ok() ? " cancelled" : " cancel: " + cancelled.ToString());
    });
  }));
  REQUIRE_OK(sender->Send(s, r, 1, Bytes("first")));
  REQUIRE_OK(sender->Send(s, r, 2, Bytes("second")));
  REQUIRE(shared.WaitFor([&] { return !log.empty(); }, seconds(30)));
  shared.With([&] { CHECK(log == "first+second inner ran cancelled"); });
  REQUIRE_OK(rt.CancelHandler(outer.id));
}

TEST_CASE("a handler's call belongs to its own runtime: it may cancel and shut down another",
          "[integration][handlers]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  // Two runtimes of this process, each with a handler.
  auto [a, b, ra, sb] = REQUIRE_VALUE(StartRuntimePair(daemon, "two-runtimes"));
  Runtime& rb = *b;
  Shared shared;
  bool b_running = false, b_release = false, b_finished = false, a_started = false;
  HandlerRegistration on_b = REQUIRE_VALUE(rb.RegisterHandler(sb, ra, 1, [&](HandlerContext&) {
    shared.With([&] { b_running = true; });
    (void)shared.WaitFor([&] { return b_release; }, seconds(60));
    shared.With([&] { b_finished = true; });
  }));
  Status cancelled, shut_down;
  bool finished_at_cancel = false, a_done = false;
  HandlerRegistration on_a = REQUIRE_VALUE(a->RegisterHandler(ra, sb, 2, [&](HandlerContext&) {
    shared.With([&] { a_started = true; });
    // Another runtime's handler: this call is not one of its, so the
    // cancel waits for its running call.
    Status status = rb.CancelHandler(on_b.id);
    const bool finished = shared.With([&] { return b_finished; });
    // And another runtime may be shut down from here.
    Status shutdown = rb.Shutdown();
    shared.With([&] {
      cancelled = status;
      finished_at_cancel = finished;
      shut_down = shutdown;
      a_done = true;
    });
  }));
  REQUIRE_OK(a->Send(ra, sb, 1, Bytes("to b")));
  REQUIRE(shared.WaitFor([&] { return b_running; }, seconds(30)));
  REQUIRE_OK(rb.Send(sb, ra, 2, Bytes("to a")));
  REQUIRE(shared.WaitFor([&] { return a_started; }, seconds(30)));
  shared.With([&] { b_release = true; });
  REQUIRE(shared.WaitFor([&] { return a_done; }, seconds(60)));
  shared.With([&] {
    CHECK(cancelled.ok());
    CHECK(finished_at_cancel);  // it waited for b's call
    CHECK(shut_down.ok());      // a call of a's handler is none of b's
  });
  REQUIRE_OK(a->CancelHandler(on_a.id));
}

TEST_CASE("a blocked handler holds up only its own registration", "[integration][handlers]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto [receiver, sender, r, s] = REQUIRE_VALUE(StartRuntimePair(daemon, "blocked"));
  Shared shared;
  bool release = false;
  int slow_calls = 0, fast_calls = 0;
  // Two handlers on one thread (by tag) and one on a thread of its own.
  HandlerRegistration slow = REQUIRE_VALUE(
      receiver->RegisterHandler(r, Gid(), 1,
                                [&](HandlerContext&) {
                                  shared.With([&] { ++slow_calls; });
                                  (void)shared.WaitFor([&] { return release; }, seconds(60));
                                },
                                {.ordered = true}));
  HandlerRegistration fast = REQUIRE_VALUE(receiver->RegisterHandler(
      r, Gid(), 2, [&](HandlerContext&) { shared.With([&] { ++fast_calls; }); }));
  int other_calls = 0;
  HandlerRegistration other = REQUIRE_VALUE(receiver->RegisterHandler(
      Gid(), Gid(), kAnyTag, [&](HandlerContext&) { shared.With([&] { ++other_calls; }); }));

  for (int i = 0; i < 3; ++i) REQUIRE_OK(sender->Send(s, r, 1, Bytes("slow")));
  REQUIRE(shared.WaitFor([&] { return slow_calls == 1; }, seconds(30)));
  // While the slow one blocks, with its backlog growing (well below the
  // unexpected cap: tocl/handler.h), the others keep being called.
  for (int i = 0; i < 50; ++i) {
    REQUIRE_OK(sender->Send(s, r, 1, Bytes("slow")));
    REQUIRE_OK(sender->Send(s, r, 2, Bytes("fast")));
    REQUIRE_OK(sender->Send(s, other.thread, 9, Bytes("other")));
  }
  REQUIRE(shared.WaitFor([&] { return fast_calls == 50 && other_calls == 50; }, seconds(60)));
  shared.With([&] {
    CHECK(slow_calls == 1);  // ordered: its next ones wait
    release = true;
  });
  REQUIRE(shared.WaitFor([&] { return slow_calls == 53; }, seconds(30)));
  for (HandlerId id : {slow.id, fast.id, other.id}) REQUIRE_OK(receiver->CancelHandler(id));
}

TEST_CASE("a handler that throws is logged, its message counts as handled, it keeps working",
          "[integration][handlers]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto [receiver, sender, r, s] = REQUIRE_VALUE(StartRuntimePair(daemon, "throws"));
  std::ostringstream captured;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(captured);
  auto previous = ReplaceLog(std::make_shared<spdlog::logger>("tocl-test", sink));
  Shared shared;
  std::vector<std::string> seen;
  HandlerRegistration handler = REQUIRE_VALUE(
      receiver->RegisterHandler(r, s, kAnyTag,
                                [&](HandlerContext& call) {
                                  std::string text = Text(call.message);
                                  shared.With([&] { seen.push_back(text); });
                                  if (text == "boom")
                                    throw std::runtime_error("the handler's own failure");
                                  if (text == "int") throw 42;
                                },
                                {.ordered = true}));
  for (const char* text : {"one", "boom", "two", "int", "three"})
    REQUIRE_OK(sender->Send(s, r, 5, Bytes(text)));
  REQUIRE(shared.WaitFor([&] { return seen.size() == 5; }, seconds(30)));
  REQUIRE_OK(receiver->CancelHandler(handler.id));
  (void)ReplaceLog(previous);
  shared.With([&] {
    CHECK(seen == std::vector<std::string>{"one", "boom", "two", "int", "three"});
  });
  const std::string lines = captured.str();
  INFO(lines);
  CHECK_THAT(lines, Catch::Contains("handler " + std::to_string(handler.id) + " on " +
                                    r.ToString() + " threw on a message from " + s.ToString() +
                                    " (tag 5): the handler's own failure"));
  CHECK_THAT(lines, Catch::Contains("(tag 5)\n"));  // the one that threw an int
  // Handled: nothing is delivered again.
  CHECK(receiver->TryRecv(r).status().code() == StatusCode::kTryAgain);
}

TEST_CASE("cancel racing arrivals: each message is handled once or stays receivable",
          "[integration][handlers]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto receiver = REQUIRE_VALUE(StartRuntime(daemon, "hcancel-receiver"));
  const Gid r = REQUIRE_VALUE(receiver->EnrollThread("r"));
  const uint64_t count = MessageCount(5'000, 1'000);
  MsgWorker source = REQUIRE_VALUE(MsgWorker::Start(
      daemon, MsgWorkerArgs("source", "hcancel-source").To({r}).Count(count).WithTag(9).Copy()));
  const Gid s = source.threads()[0];
  Shared shared;
  std::vector<int> seen(count, 0);
  uint64_t total = 0, by_handlers = 0, late_calls = 0, rounds = 0;
  std::string problems;
  auto record = [&](const Buffer& message) {
    const uint64_t seq = SeqOf(message);
    std::string bad = CheckPayload(message.span(), s, r);
    if (seq >= count || !bad.empty()) {
      problems += "seq " + std::to_string(seq) + ": " + bad + "; ";
      return;
    }
    ++seen[seq];
    ++total;
  };
  const auto deadline = std::chrono::steady_clock::now() + seconds(120);
  while (shared.With([&] { return total; }) < count &&
         std::chrono::steady_clock::now() < deadline) {
    ++rounds;
    auto cancelled = std::make_shared<std::atomic<bool>>(false);
    HandlerRegistration handler = REQUIRE_VALUE(
        receiver->RegisterHandler(r, s, 9,
                                  [&, cancelled](HandlerContext& call) {
                                    shared.With([&] {
                                      if (cancelled->load())
                                        ++late_calls;  // a call after Cancel returned
                                      record(call.message);
                                      ++by_handlers;
                                    });
                                  },
                                  {.ordered = rounds % 2 == 0, .max_concurrent_calls = 2}));
    // Now and then let calls happen before the cancel.
    if (rounds % 3 == 0) {
      const uint64_t before = shared.With([&] { return total; });
      (void)shared.WaitFor([&] { return total > before; }, milliseconds(20));
    }
    REQUIRE_OK(receiver->CancelHandler(handler.id));
    cancelled->store(true);
    // What the handler did not take is receivable; take some of it.
    for (int i = 0; i < 3; ++i) {
      Result<Buffer> left = receiver->TryRecv(r, s, 9);
      if (!left.ok()) break;
      shared.With([&] { record(*left); });
    }
  }
  CHECK(source.Finish(seconds(30)).value_or(-1) == 0);
  CHECK(receiver->TryRecv(r).status().code() == StatusCode::kTryAgain);
  shared.With([&] {
    CHECK(problems.empty());
    CHECK(late_calls == 0);
    for (uint64_t seq = 0; seq < count; ++seq) {
      INFO("seq " << seq);
      REQUIRE(seen[seq] == 1);
    }
    INFO(rounds << " rounds, " << by_handlers << " by handlers");
    CHECK(by_handlers > 0);
    CHECK(by_handlers < count);  // some were left to TryRecv
  });
}

TEST_CASE("cancel waits for a running call, but not from inside its own call",
          "[integration][handlers]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto [receiver, sender, r, s] = REQUIRE_VALUE(StartRuntimePair(daemon, "cancel-wait"));
  Runtime& rt = *receiver;
  Shared shared;

  SECTION("from another thread") {
    bool running = false, release = false, finished = false;
    // Ordered: a message that comes while the call runs waits for it, and
    // the cancel then leaves it queued.
    HandlerRegistration handler = REQUIRE_VALUE(
        rt.RegisterHandler(r, s, 1,
                           [&](HandlerContext&) {
                             shared.With([&] { running = true; });
                             (void)shared.WaitFor([&] { return release; }, seconds(60));
                             shared.With([&] { finished = true; });
                           },
                           {.ordered = true}));
    REQUIRE_OK(sender->Send(s, r, 1, Bytes("a")));
    REQUIRE(shared.WaitFor([&] { return running; }, seconds(30)));
    bool cancel_started = false;
    auto cancel = std::async(std::launch::async, [&] {
      shared.With([&] { cancel_started = true; });
      Status status = rt.CancelHandler(handler.id);
      // The call had returned by then.
      return std::make_pair(status, shared.With([&] { return finished; }));
    });
    REQUIRE(shared.WaitFor([&] { return cancel_started; }, seconds(10)));
    // The cancel is waiting for the call.
    CHECK(cancel.wait_for(milliseconds(100)) == std::future_status::timeout);
    // A message sent now is not handled: it stays receivable.
    REQUIRE_OK(sender->Send(s, r, 1, Bytes("b")));
    shared.With([&] { release = true; });
    auto [status, was_finished] = cancel.get();
    CHECK(status.ok());
    CHECK(was_finished);
    CHECK(Text(REQUIRE_VALUE(rt.RecvFor(r, seconds(10), s, 1))) == "b");
  }

  SECTION("from inside: returns at once, no call starts after") {
    std::atomic<int> calls{0};
    Status inside;
    HandlerId id = 0;
    bool done = false;
    HandlerRegistration handler =
        REQUIRE_VALUE(rt.RegisterHandler(r, s, 1,
                                         [&](HandlerContext&) {
                                           ++calls;
                                           Status status =
                                               rt.CancelHandler(shared.With([&] { return id; }));
                                           shared.With([&] {
                                             inside = status;
                                             done = true;
                                           });
                                         },
                                         {.ordered = true}));
    shared.With([&] { id = handler.id; });
    REQUIRE_OK(sender->Send(s, r, 1, Bytes("1")));
    REQUIRE_OK(sender->Send(s, r, 1, Bytes("2")));
    REQUIRE(shared.WaitFor([&] { return done; }, seconds(30)));
    shared.With([&] { CHECK(inside.ok()); });
    // The second message was not handled: it is receivable.
    CHECK(Text(REQUIRE_VALUE(rt.RecvFor(r, seconds(10), s, 1))) == "2");
    CHECK(calls == 1);
    CHECK(rt.CancelHandler(handler.id).code() == StatusCode::kNotFound);
  }

  SECTION("unordered, from inside while other calls start: nothing is taken after it returns") {
    // Each round: an unordered handler gets a burst; its first call cancels
    // it while other pool threads are taking the next messages. Once the
    // cancel returned, the calls still to run are those that had taken
    // their message: a message sent after it is never handled, and every
    // message of the burst is handled once or stays receivable, in order.
    struct Round {
      HandlerId id = 0;
      bool cancelling = false, returned = false;
      int active = 0;
      std::vector<int> handled;
      Status status;
    };
    const int burst = 8;
    int handled = 0, received = 0;
    for (int rounds = 0; rounds < 40; ++rounds) {
      auto round = std::make_shared<Round>();
      HandlerRegistration handler = REQUIRE_VALUE(rt.RegisterHandler(
          r, s, 1,
          [&rt, &shared, round](HandlerContext& call) {
            const int number = std::stoi(Text(call.message));
            const bool cancel = shared.With([&] {
              ++round->active;
              round->handled.push_back(number);
              return !std::exchange(round->cancelling, true);
            });
            Status status =
                cancel ? rt.CancelHandler(shared.With([&] { return round->id; })) : Status::Ok();
            shared.With([&] {
              if (cancel) {
                round->status = status;
                round->returned = true;
              }
              --round->active;
            });
          },
          {.max_concurrent_calls = 4}));
      shared.With([&] { round->id = handler.id; });
      for (int i = 0; i < burst; ++i) REQUIRE_OK(sender->Send(s, r, 1, Bytes(std::to_string(i))));
      REQUIRE(shared.WaitFor([&] { return round->returned; }, seconds(30)));
      shared.With([&] { CHECK(round->status.ok()); });
      // Sent after the cancel returned: receivable, never handled. Taking
      // it takes every burst message no call took (they are ahead of it).
      REQUIRE_OK(sender->Send(s, r, 1, Bytes("100")));
      std::vector<int> left;
      for (;;) {
        const int number = std::stoi(Text(REQUIRE_VALUE(rt.RecvFor(r, seconds(10), s, 1))));
        if (number == 100) break;
        left.push_back(number);
      }
      // The calls it left running (their messages taken before it returned)
      // run and end on their own.
      REQUIRE(shared.WaitFor(
          [&] {
            return round->handled.size() + left.size() >= static_cast<size_t>(burst) &&
                   round->active == 0;
          },
          seconds(30)));
      shared.With([&] {
        std::vector<int> all = round->handled;
        all.insert(all.end(), left.begin(), left.end());
        std::sort(all.begin(), all.end());
        std::vector<int> expected(burst);
        for (int i = 0; i < burst; ++i) expected[i] = i;
        CHECK(all == expected);  // each once: 100 is not among them
        CHECK(std::is_sorted(left.begin(), left.end()));
        handled += static_cast<int>(round->handled.size());
      });
      received += static_cast<int>(left.size());
    }
    INFO(handled << " handled, " << received << " received");
    CHECK(rt.TryRecv(r).status().code() == StatusCode::kTryAgain);
  }

  SECTION("two handlers cancelling each other from their calls do not deadlock") {
    HandlerId ids[2] = {0, 0};
    int started = 0, returned = 0;
    std::vector<HandlerRegistration> handlers;
    for (int i = 0; i < 2; ++i) {
      handlers.push_back(
          REQUIRE_VALUE(rt.RegisterHandler(r, s, Tag(10 + i), [&, i](HandlerContext&) {
            // Both calls run, then each cancels the other.
            shared.With([&] { ++started; });
            (void)shared.WaitFor([&] { return started == 2; }, seconds(30));
            (void)rt.CancelHandler(shared.With([&] { return ids[1 - i]; }));
            shared.With([&] { ++returned; });
          })));
      shared.With([&] { ids[i] = handlers.back().id; });
    }
    REQUIRE_OK(sender->Send(s, r, 10, Bytes("a")));
    REQUIRE_OK(sender->Send(s, r, 11, Bytes("b")));
    REQUIRE(shared.WaitFor([&] { return returned == 2; }, seconds(30)));
  }
}

TEST_CASE("bad use of handlers gets clear errors", "[integration][handlers]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto [receiver, sender, r, s] = REQUIRE_VALUE(StartRuntimePair(daemon, "bad-handlers"));
  Runtime& rt = *receiver;
  auto nothing = [](HandlerContext&) {};

  Status status = rt.RegisterHandler(Gid::Thread(rt.gid(), 999), Gid(), 1, nothing).status();
  CHECK(status.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(status.message(), Catch::Contains("was never enrolled"));
  status = rt.RegisterHandler(s, Gid(), 1, nothing).status();  // another process's thread
  CHECK(status.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(status.message(), Catch::Contains("is not a thread of this process"));
  status = rt.RegisterHandler(Gid::Thread(rt.gid(), Gid::kMaxThread), Gid(), 1, nothing).status();
  CHECK(status.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(status.message(), Catch::Contains("keeps for itself"));
  status = rt.RegisterHandler(r, Gid(), 1, HandlerFunction()).status();
  CHECK(status.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(status.message(), Catch::Contains("empty handler"));
  // A malformed source: a thread index with no process.
  status = rt.RegisterHandler(r, Gid::FromRaw((uint64_t{1} << 48) | 5), 1, nothing).status();
  CHECK(status.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(status.message(), Catch::Contains("is not a thread, process or host"));
  // Tag bits outside the mask are ignored, as Recv ignores them: not bad use.
  Shared shared;
  std::vector<Tag> loose_tags;
  TagMatch loose;
  loose.tag = 0x13;
  loose.mask = 0xF0;
  HandlerRegistration masked =
      REQUIRE_VALUE(rt.RegisterHandler(r, s, loose, [&](HandlerContext& call) {
        shared.With([&] { loose_tags.push_back(call.info.tag); });
      }));
  REQUIRE_OK(sender->Send(s, r, 0x2F, Bytes("not its")));
  REQUIRE_OK(sender->Send(s, r, 0x1F, Bytes("its")));
  REQUIRE(shared.WaitFor([&] { return !loose_tags.empty(); }, seconds(30)));
  REQUIRE_OK(rt.CancelHandler(masked.id));
  shared.With([&] { CHECK(loose_tags == std::vector<Tag>{0x1F}); });
  // Recv takes the same selector the same way.
  REQUIRE_OK(sender->Send(s, r, 0x15, Bytes("recv")));
  CHECK(Text(REQUIRE_VALUE(rt.RecvFor(r, seconds(10), s, loose))) == "recv");
  CHECK(Text(REQUIRE_VALUE(rt.RecvFor(r, seconds(10), s, 0x2F))) == "not its");
  status = rt.RegisterHandler(r, Gid(), 1, nothing, {.max_concurrent_calls = 0}).status();
  CHECK(status.code() == StatusCode::kInvalidArgument);
  status = rt.RegisterHandler(Gid(), Gid(), 1, nothing, {.thread_name = ""}).status();
  CHECK(status.code() == StatusCode::kInvalidArgument);

  // A thread that left.
  const Gid gone = REQUIRE_VALUE(rt.EnrollThread("gone"));
  REQUIRE_OK(rt.LeaveThread(gone));
  status = rt.RegisterHandler(gone, Gid(), 1, nothing).status();
  CHECK(status.code() == StatusCode::kFailedPrecondition);

  // Cancel twice, cancel what never was.
  HandlerRegistration handler = REQUIRE_VALUE(rt.RegisterHandler(r, Gid(), 1, nothing));
  REQUIRE_OK(rt.CancelHandler(handler.id));
  status = rt.CancelHandler(handler.id);
  CHECK(status.code() == StatusCode::kNotFound);
  CHECK_THAT(status.message(), Catch::Contains("cancelled already"));
  CHECK(rt.CancelHandler(987654).code() == StatusCode::kNotFound);

  // Shutdown from a call is refused.
  bool called = false;
  Status from_call;
  HandlerRegistration stopper = REQUIRE_VALUE(rt.RegisterHandler(r, s, 2, [&](HandlerContext&) {
    Status refused = rt.Shutdown();
    shared.With([&] {
      from_call = refused;
      called = true;
    });
  }));
  REQUIRE_OK(sender->Send(s, r, 2, Bytes("stop")));
  REQUIRE(shared.WaitFor([&] { return called; }, seconds(30)));
  shared.With([&] {
    CHECK(from_call.code() == StatusCode::kFailedPrecondition);
    CHECK_THAT(from_call.message(), Catch::Contains("from a message handler"));
  });
  REQUIRE_OK(rt.CancelHandler(stopper.id));
  // Once shut down, no registration.
  REQUIRE_OK(rt.Shutdown());
  CHECK(rt.RegisterHandler(r, Gid(), 1, nothing).status().code() == StatusCode::kUnavailable);
}

TEST_CASE("destroying the runtime from its own handler call aborts with a message, never hangs",
          "[integration][handlers]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  // The worker's handler destroys its Runtime; stdin stays open, so only
  // the library ends the process.
  MsgWorker worker =
      REQUIRE_VALUE(MsgWorker::Start(daemon, MsgWorkerArgs("destroy-in-handler", "hdestroy")));
  REQUIRE(worker.WaitForLine("destroying", seconds(60)));
  Result<int> exit = worker.child().Wait(seconds(60));
  INFO(worker.Output());
  REQUIRE_OK(exit.status());
  CHECK(*exit == 128 + SIGABRT);
  CHECK_THAT(worker.Output(),
             Catch::Contains("destroyed from inside one of its own message handler calls"));
  CHECK_THAT(worker.Output(), !Catch::Contains("destroyed\n"));
}

TEST_CASE("shutdown starts no call, wakes and waits for the running ones",
          "[integration][handlers]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto receiver = REQUIRE_VALUE(StartRuntime(daemon, "hshutdown-receiver"));
  Runtime& rt = *receiver;
  const Gid r = REQUIRE_VALUE(rt.EnrollThread("r"));
  const Gid idle = REQUIRE_VALUE(rt.EnrollThread("idle"));
  MsgWorker source = REQUIRE_VALUE(MsgWorker::Start(
      daemon, MsgWorkerArgs("source", "hshutdown-source").To({r}).Count(0).WithTag(3)));
  Shared shared;
  int blocked_in_recv = 0, calls = 0;
  std::vector<StatusCode> recv_results;
  std::atomic<bool> shutdown_returned{false};
  std::atomic<int> calls_after_return{0};
  // Every call waits in a Recv that nothing will satisfy.
  HandlerRegistration handler =
      REQUIRE_VALUE(rt.RegisterHandler(r, Gid(), 3,
                                       [&](HandlerContext&) {
                                         shared.With([&] {
                                           ++calls;
                                           ++blocked_in_recv;
                                         });
                                         Result<Buffer> never = rt.RecvFor(idle, seconds(60));
                                         if (shutdown_returned) ++calls_after_return;
                                         shared.With([&] {
                                           --blocked_in_recv;
                                           recv_results.push_back(never.status().code());
                                         });
                                       },
                                       {.max_concurrent_calls = 2}));
  REQUIRE(shared.WaitFor([&] { return blocked_in_recv == 2; }, seconds(30)));
  const auto started = std::chrono::steady_clock::now();
  REQUIRE_OK(rt.Shutdown());
  shutdown_returned = true;
  CHECK(std::chrono::steady_clock::now() - started < seconds(30));
  shared.With([&] {
    CHECK(blocked_in_recv == 0);  // the running calls returned before Shutdown did
    CHECK(calls == 2);            // the source kept sending: no call started after
    REQUIRE(recv_results.size() == 2);
    for (StatusCode code : recv_results) CHECK(code == StatusCode::kCancelled);
  });
  CHECK(calls_after_return == 0);
  CHECK(rt.CancelHandler(handler.id).code() == StatusCode::kNotFound);  // Shutdown cancelled it
  (void)source.Finish(seconds(30));
}

}  // namespace
}  // namespace tocl::testing
