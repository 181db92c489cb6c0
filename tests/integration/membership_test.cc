// Membership upcalls (Runtime::WatchMembers, tocl/membership.h) against a
// real daemon: tocl-msg-worker processes started and killed during a
// watch, threads that enroll and leave, a daemon restarted under a watch,
// cancels racing events and from inside a callback, bad queries. Also the
// latency from a process's SIGKILL to its kLeft callback (printed).
#include "tocl/membership.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "daemon_harness.h"
#include "messaging_support.h"
#include "status_assertions.h"
#include "tocl/exit_notice.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

struct Seen {
  MembershipChange change;
  Gid gid;
  EntityState state;
  Clock::time_point at;
};

// What a watch called back with, in order, for the test to wait on.
class EventLog {
 public:
  MembershipCallback Callback() {
    return [this](const MembershipEvent& event) {
      std::lock_guard lock(mu_);
      events_.push_back({event.change, event.entity.gid, event.entity.state, Clock::now()});
      changed_.notify_all();
    };
  }

  std::vector<Seen> Events() const {
    std::lock_guard lock(mu_);
    return events_;
  }

  // Waits until `pred(events)` holds; false after `timeout`.
  bool WaitUntil(const std::function<bool(const std::vector<Seen>&)>& pred,
                 milliseconds timeout = milliseconds(30'000)) const {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, timeout, [&] { return pred(events_); });
  }

  bool WaitFor(MembershipChange change, Gid gid,
               milliseconds timeout = milliseconds(30'000)) const {
    return WaitUntil(
        [&](const std::vector<Seen>& events) { return Count(events, change, gid) > 0; }, timeout);
  }

  static size_t Count(const std::vector<Seen>& events, MembershipChange change, Gid gid) {
    return std::count_if(events.begin(), events.end(), [&](const Seen& seen) {
      return seen.change == change && seen.gid == gid;
    });
  }
  size_t Count(MembershipChange change, Gid gid) const { return Count(Events(), change, gid); }

  std::string Describe() const {
    std::string text;
    for (const Seen& seen : Events()) {
      text += fmt::format("{} {} {}\n", MembershipChangeName(seen.change), seen.gid.ToString(),
                          EntityStateName(seen.state));
    }
    return text;
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  std::vector<Seen> events_;
};

bool HasCurrent(const std::vector<Seen>& events) {
  return std::any_of(events.begin(), events.end(),
                     [](const Seen& seen) { return seen.change == MembershipChange::kCurrent; });
}

// Every gid joined at most once, and left at most once after its join.
void CheckNoDuplicates(const EventLog& log) {
  INFO(log.Describe());
  std::map<Gid, int> joined, left;
  for (const Seen& seen : log.Events()) {
    if (seen.change == MembershipChange::kJoined) {
      CHECK(++joined[seen.gid] == 1);
    } else if (seen.change == MembershipChange::kLeft) {
      CHECK(joined[seen.gid] == 1);
      CHECK(++left[seen.gid] == 1);
    }
  }
}

// A daemon and a runtime that watches it. As a fixture it outlives the
// test's locals: a test whose own EventLogs `watcher` calls declares them,
// then a Watching of its own.
struct Watching {
  Watching() {
    REQUIRE_OK(daemon.Start());
    watcher = REQUIRE_VALUE(StartRuntime(daemon, "watcher", "shm"));
  }

  EventLog log;  // first: it outlives the runtime, whose watches call it
  Daemon daemon;
  std::unique_ptr<Runtime> watcher;
};

MsgWorker MustStartIdle(const Daemon& daemon, const std::string& name, uint32_t threads = 1) {
  return REQUIRE_VALUE(
      MsgWorker::Start(daemon, MsgWorkerArgs("idle", name).Subsystems("shm").Threads(threads)));
}

TEST_CASE_METHOD(Watching,
                 "a membership watch delivers the current members once, then joins and leaves of "
                 "real processes",
                 "[integration][membership]") {
  MsgWorker a = MustStartIdle(daemon, "member-a");
  MsgWorker b = MustStartIdle(daemon, "member-b");
  MsgWorker other = MustStartIdle(daemon, "bystander");
  const std::string query = "kind=process and name~member-*";

  const uint64_t id = REQUIRE_VALUE(watcher->WatchMembers(query, log.Callback()));
  REQUIRE(log.WaitUntil(HasCurrent));
  {
    // The initial set, in Gid order, then kCurrent; nothing else.
    const std::vector<Seen> first = log.Events();
    INFO(log.Describe());
    REQUIRE(first.size() == 3);
    CHECK(first[0].change == MembershipChange::kJoined);
    CHECK(first[0].gid == a.process());
    CHECK(first[0].state == EntityState::kRunning);
    CHECK(first[1].change == MembershipChange::kJoined);
    CHECK(first[1].gid == b.process());
    CHECK(first[2].change == MembershipChange::kCurrent);
  }

  // A process that joins during the watch; one killed, one that exits.
  MsgWorker c = MustStartIdle(daemon, "member-c");
  CHECK(log.WaitFor(MembershipChange::kJoined, c.process()));
  REQUIRE_OK(a.child().Signal(SIGKILL));
  CHECK(log.WaitFor(MembershipChange::kLeft, a.process()));
  CHECK(b.Finish(seconds(30)).value_or(-1) == 0);
  CHECK(log.WaitFor(MembershipChange::kLeft, b.process()));
  // The bystander's exit is a change too, but not the watch's.
  CHECK(other.Finish(seconds(30)).value_or(-1) == 0);
  MsgWorker d = MustStartIdle(daemon, "member-d");
  CHECK(log.WaitFor(MembershipChange::kJoined, d.process()));

  INFO(log.Describe());
  for (const Seen& seen : log.Events()) CHECK(seen.gid != other.process());
  // A leave says what the directory says: exited.
  for (const Seen& seen : log.Events()) {
    if (seen.change == MembershipChange::kLeft) CHECK(seen.state == EntityState::kExited);
  }
  CheckNoDuplicates(log);
  CHECK(log.Count(MembershipChange::kLeft, c.process()) == 0);
  REQUIRE_OK(watcher->CancelWatchMembers(id));
  CHECK(watcher->CancelWatchMembers(id).code() == StatusCode::kNotFound);
  CHECK(c.Finish(seconds(30)).value_or(-1) == 0);
  CHECK(d.Finish(seconds(30)).value_or(-1) == 0);
}

TEST_CASE("threads join and leave a membership watch: enrolled, left, and their process killed",
          "[integration][membership]") {
  EventLog of_worker;  // outlives the runtime, whose watch calls it
  Watching watching;
  Daemon& daemon = watching.daemon;
  Runtime* watcher = watching.watcher.get();
  EventLog& log = watching.log;
  auto indexers = REQUIRE_VALUE(StartRuntime(daemon, "indexers", "shm"));
  REQUIRE_VALUE(watcher->WatchMembers("kind=thread and role=indexer", log.Callback()));
  REQUIRE(log.WaitUntil(HasCurrent));
  CHECK(log.Events().size() == 1);  // nobody yet

  const Gid first = REQUIRE_VALUE(indexers->EnrollThread("i1", {{"role", "indexer"}}));
  const Gid second = REQUIRE_VALUE(indexers->EnrollThread("i2", {{"role", "indexer"}}));
  REQUIRE_VALUE(indexers->EnrollThread("m1", {{"role", "merger"}}));
  CHECK(log.WaitFor(MembershipChange::kJoined, first));
  CHECK(log.WaitFor(MembershipChange::kJoined, second));
  REQUIRE_OK(indexers->LeaveThread(first));
  CHECK(log.WaitFor(MembershipChange::kLeft, first));

  // The threads of another process, by process id: all leave when it is killed.
  MsgWorker worker = MustStartIdle(daemon, "many", 4);
  REQUIRE_VALUE(watcher->WatchMembers("kind=thread and process=" + worker.process().ToString(),
                                      of_worker.Callback()));
  REQUIRE(of_worker.WaitUntil([&](const std::vector<Seen>& events) {
    return std::count_if(events.begin(), events.end(), [](const Seen& seen) {
             return seen.change == MembershipChange::kJoined;
           }) == 4;
  }));
  REQUIRE_OK(worker.child().Signal(SIGKILL));
  for (Gid thread : worker.threads()) CHECK(of_worker.WaitFor(MembershipChange::kLeft, thread));
  CheckNoDuplicates(log);
  CheckNoDuplicates(of_worker);
  CHECK(log.Count(MembershipChange::kLeft, second) == 0);
}

TEST_CASE("a membership watch of a query that matches nothing, and bad input",
          "[integration][membership]") {
  EventLog nothing, sentinel;  // outlive the runtime, whose watches call them
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto runtime = REQUIRE_VALUE(StartRuntime(daemon, "asker", "shm"));

  REQUIRE_VALUE(runtime->WatchMembers("kind=thread and role=nobody", nothing.Callback()));
  REQUIRE_VALUE(runtime->WatchMembers("kind=thread and role=sentinel", sentinel.Callback()));
  REQUIRE(nothing.WaitUntil(HasCurrent));
  REQUIRE(sentinel.WaitUntil(HasCurrent));
  // Changes that do not match are read past. One watch handles changes in
  // order, so once it reports t2 it has read past t1: nothing about t1
  // came, nor will.
  const Gid first = REQUIRE_VALUE(runtime->EnrollThread("t1", {{"role", "somebody"}}));
  const Gid last = REQUIRE_VALUE(runtime->EnrollThread("t2", {{"role", "sentinel"}}));
  REQUIRE(sentinel.WaitFor(MembershipChange::kJoined, last));
  {
    INFO(sentinel.Describe());
    const std::vector<Seen> seen = sentinel.Events();
    CHECK(std::none_of(seen.begin(), seen.end(),
                       [&](const Seen& event) { return event.gid == first; }));
    CHECK(seen.size() == 2);  // kCurrent, then t2's kJoined
  }
  // The watch that matches nothing got only its kCurrent (by then, at
  // least: the two watches' threads are not ordered against each other).
  CHECK(nothing.Events().size() == 1);

  struct Bad {
    std::string query;
    std::string says;
  };
  for (const Bad& bad : std::vector<Bad>{{"role=", "at position 5"},
                                         {"role merger", "at position 5"},
                                         {"role=a)", "at position 6"},
                                         // Not taken for "(role=a) or (kind=host)".
                                         {"role=a) or (kind=host", "at position 6"},
                                         {"kind=task", "unknown kind 'task'"},
                                         {"", "query"}}) {
    INFO("'" << bad.query << "'");
    const auto start = Clock::now();
    auto watched = runtime->WatchMembers(bad.query, [](const MembershipEvent&) {});
    CHECK(watched.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(watched.status().message(), Catch::Contains(bad.says));
    CHECK(Clock::now() - start < seconds(5));
  }
  auto no_callback = runtime->WatchMembers("kind=thread", {});
  CHECK(no_callback.status().code() == StatusCode::kInvalidArgument);
  CHECK(runtime->CancelWatchMembers(12345).code() == StatusCode::kNotFound);

  // After Shutdown: Unavailable, and the watches are gone.
  REQUIRE_OK(runtime->Shutdown());
  CHECK(runtime->WatchMembers("kind=thread", [](const MembershipEvent&) {}).status().code() ==
        StatusCode::kUnavailable);
}

TEST_CASE("no membership callback runs or starts once CancelWatchMembers returns, under churn",
          "[integration][membership]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto watcher = REQUIRE_VALUE(StartRuntime(daemon, "watcher", "shm"));
  auto churn = REQUIRE_VALUE(StartRuntime(daemon, "churn", "shm"));
  // Threads enroll and leave all the time.
  std::jthread churner([&](std::stop_token stop) {
    for (int i = 0; !stop.stop_requested(); ++i) {
      auto thread = churn->EnrollThread(fmt::format("c{}", i), {{"role", "churn"}});
      if (!thread.ok()) break;
      if (i % 2 == 1) (void)churn->LeaveThread(*thread);
      // Paced (a few thousand changes a second), not synchronised: the
      // watches read a set that grows by half of them.
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });

  const int rounds = 30;
  std::atomic<int> late{0};
  std::atomic<int> calls{0};
  for (int round = 0; round < rounds; ++round) {
    std::atomic<bool> cancelled{false};
    std::atomic<bool> inside{false};
    auto id = watcher->WatchMembers("kind=thread and role=churn", [&](const MembershipEvent&) {
      inside.store(true);
      if (cancelled.load()) late.fetch_add(1);
      calls.fetch_add(1);
      // A slow callback widens the window a cancel can meet it in.
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      if (cancelled.load()) late.fetch_add(1);
      inside.store(false);
    });
    REQUIRE(id.ok());
    // Cancel at a different moment each round (some while a callback runs).
    std::this_thread::sleep_for(std::chrono::microseconds(round * 300));
    REQUIRE_OK(watcher->CancelWatchMembers(*id));
    cancelled.store(true);
    CHECK_FALSE(inside.load());
  }
  churner.request_stop();
  churner.join();
  INFO(calls.load() << " callbacks in " << rounds << " watches");
  CHECK(calls.load() > 0);
  CHECK(late.load() == 0);
}

TEST_CASE("a membership callback may call the runtime and cancel its own watch",
          "[integration][membership]") {
  EventLog later;  // outlives the runtime, whose watch calls it
  std::promise<uint64_t> id_promise;
  std::shared_future<uint64_t> id_future = id_promise.get_future().share();
  std::atomic<int> calls{0};
  std::promise<Status> cancelled;
  std::promise<size_t> queried;
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto watcher = REQUIRE_VALUE(StartRuntime(daemon, "watcher", "shm"));
  auto members = REQUIRE_VALUE(StartRuntime(daemon, "members", "shm"));
  const Gid one = REQUIRE_VALUE(members->EnrollThread("one", {{"role", "member"}}));
  REQUIRE(REQUIRE_VALUE(watcher->WaitForQuery("role=member", 1, seconds(30))).size() == 1);

  auto id = watcher->WatchMembers("kind=thread and role=member", [&](const MembershipEvent&) {
    if (calls.fetch_add(1) > 0) return;
    // The runtime answers from inside a callback...
    auto found = watcher->Query("role=member");
    queried.set_value(found.ok() ? found->size() : 0);
    // ... and the watch cancels itself without waiting for itself.
    cancelled.set_value(watcher->CancelWatchMembers(id_future.get()));
  });
  REQUIRE(id.ok());
  id_promise.set_value(*id);
  auto cancel_status = cancelled.get_future();
  REQUIRE(cancel_status.wait_for(seconds(30)) == std::future_status::ready);
  CHECK_OK(cancel_status.get());
  CHECK(queried.get_future().get() == 1);
  // Nothing after it: more members join, a later watch sees them, the
  // cancelled one was called once (its first member), not for its kCurrent.
  const Gid two = REQUIRE_VALUE(members->EnrollThread("two", {{"role", "member"}}));
  REQUIRE_VALUE(watcher->WatchMembers("kind=thread and role=member", later.Callback()));
  CHECK(later.WaitFor(MembershipChange::kJoined, two));
  CHECK(later.Count(MembershipChange::kJoined, one) == 1);
  CHECK(calls.load() == 1);
  CHECK(watcher->CancelWatchMembers(*id).code() == StatusCode::kNotFound);
}

TEST_CASE("a blocked membership callback holds up only its own watch, which then catches up",
          "[integration][membership]") {
  // What the first callback waits for. Opened at the latest as the test
  // ends, before the runtime (declared after it) joins the watch.
  struct Gate {
    std::promise<void> promise;
    std::shared_future<void> opened = promise.get_future().share();
    bool open = false;
    void Open() {
      if (!std::exchange(open, true)) promise.set_value();
    }
    ~Gate() { Open(); }
  };
  EventLog slow;  // outlives the runtime, whose watch calls it
  Watching watching;
  Gate gate;
  auto members = REQUIRE_VALUE(StartRuntime(watching.daemon, "members", "shm"));
  const std::string query = "kind=thread and role=member";
  REQUIRE_VALUE(watching.watcher->WatchMembers(
      query, [log = slow.Callback(), opened = gate.opened](const MembershipEvent& event) {
        log(event);
        opened.wait();  // the first call blocks until the test opens the gate
      }));
  REQUIRE(slow.WaitUntil([](const std::vector<Seen>& events) { return events.size() == 1; }));
  REQUIRE_VALUE(watching.watcher->WatchMembers(query, watching.log.Callback()));
  // m0 joins (seen by the other watch), then m1..m4, then m0 leaves (a
  // join and leave between two reads would be reported by neither).
  std::vector<Gid> joined;
  joined.push_back(REQUIRE_VALUE(members->EnrollThread("m0", {{"role", "member"}})));
  REQUIRE(watching.log.WaitFor(MembershipChange::kJoined, joined[0]));
  for (int i = 1; i < 5; ++i) {
    joined.push_back(
        REQUIRE_VALUE(members->EnrollThread(fmt::format("m{}", i), {{"role", "member"}})));
  }
  REQUIRE_OK(members->LeaveThread(joined[0]));
  // The other watch sees them all while the first is blocked.
  CHECK(watching.log.WaitFor(MembershipChange::kLeft, joined[0]));
  for (Gid gid : joined) CHECK(watching.log.WaitFor(MembershipChange::kJoined, gid));
  CHECK(slow.Events().size() == 1);
  gate.Open();
  // Then the blocked one (whose first call was its kCurrent: nobody
  // matched) catches up with what is there now, once each; m0 joined and
  // left meanwhile: it may come as both or as neither.
  for (size_t i = 1; i < joined.size(); ++i) {
    CHECK(slow.WaitFor(MembershipChange::kJoined, joined[i]));
  }
  CHECK(slow.Events().front().change == MembershipChange::kCurrent);
  CheckNoDuplicates(slow);
  CHECK(slow.Count(MembershipChange::kJoined, joined[0]) ==
        slow.Count(MembershipChange::kLeft, joined[0]));
}

TEST_CASE_METHOD(Watching,
                 "a daemon restart under a membership watch is reconciled: leaves for what died "
                 "meanwhile, no duplicate joins",
                 "[integration][membership]") {
  MsgWorker a = MustStartIdle(daemon, "member-a");
  MsgWorker b = MustStartIdle(daemon, "member-b");
  MsgWorker c = MustStartIdle(daemon, "member-c");
  REQUIRE_VALUE(watcher->WatchMembers("kind=process and name~member-*", log.Callback()));
  REQUIRE(log.WaitUntil(HasCurrent));
  REQUIRE(log.Events().size() == 4);

  REQUIRE(daemon.Stop().value_or(-1) == 0);
  // b dies while the daemon is down: nobody hears its stream break.
  REQUIRE(b.child().Kill().ok());
  REQUIRE_OK(daemon.Start());
  // The restarted daemon marks b exited at once (its pid is gone); a and c
  // re-enroll by themselves.
  CHECK(log.WaitFor(MembershipChange::kLeft, b.process()));
  MsgWorker d = MustStartIdle(daemon, "member-d");
  CHECK(log.WaitFor(MembershipChange::kJoined, d.process()));
  // a still runs: killed now, it leaves (the watch follows the new daemon).
  REQUIRE_OK(a.child().Signal(SIGKILL));
  CHECK(log.WaitFor(MembershipChange::kLeft, a.process()));

  INFO(log.Describe());
  CheckNoDuplicates(log);
  CHECK(log.Count(MembershipChange::kJoined, a.process()) == 1);
  CHECK(log.Count(MembershipChange::kJoined, c.process()) == 1);
  CHECK(log.Count(MembershipChange::kLeft, c.process()) == 0);
  CHECK(c.Finish(seconds(30)).value_or(-1) == 0);
  CHECK(d.Finish(seconds(30)).value_or(-1) == 0);
}

// "min / median / max" of `ms`, sorted here.
std::string Spread(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return fmt::format("min {:.1f} ms, median {:.1f} ms, max {:.1f} ms", ms.front(),
                     ms[ms.size() / 2], ms.back());
}

TEST_CASE_METHOD(Watching, "the time from a process's SIGKILL to its kLeft callback",
                 "[integration][membership][latency]") {
  REQUIRE_VALUE(watcher->WatchMembers("kind=process and name~victim-*", log.Callback()));
  REQUIRE(log.WaitUntil(HasCurrent));
  // The same-run baseline: an exit notice (Notify by callback) of the same
  // process, which reads nothing once the daemon's change comes.
  std::vector<double> left_ms, notice_ms;
  for (int i = 0; i < 10; ++i) {
    MsgWorker victim = MustStartIdle(daemon, fmt::format("victim-{}", i));
    REQUIRE(log.WaitFor(MembershipChange::kJoined, victim.process()));
    std::promise<Clock::time_point> noticed;
    REQUIRE_VALUE(watcher->Notify(victim.process(),
                                  [&](const ExitNotice&) { noticed.set_value(Clock::now()); }));
    const auto killed = Clock::now();
    REQUIRE_OK(victim.child().Signal(SIGKILL));
    REQUIRE(log.WaitFor(MembershipChange::kLeft, victim.process()));
    auto notice = noticed.get_future();
    REQUIRE(notice.wait_for(seconds(30)) == std::future_status::ready);
    notice_ms.push_back(std::chrono::duration<double, std::milli>(notice.get() - killed).count());
    for (const Seen& seen : log.Events()) {
      if (seen.change == MembershipChange::kLeft && seen.gid == victim.process()) {
        left_ms.push_back(std::chrono::duration<double, std::milli>(seen.at - killed).count());
      }
    }
  }
  REQUIRE(left_ms.size() == notice_ms.size());
  const std::string summary = fmt::format(
      "membership: SIGKILL to the kLeft callback over {} processes: {}; to the "
      "exit notice callback (baseline): {}",
      left_ms.size(), Spread(left_ms), Spread(notice_ms));
  std::cerr << summary << "\n";
  INFO(summary);
  CHECK(*std::max_element(left_ms.begin(), left_ms.end()) < 5'000);  // generous: the VM is shared
  CheckNoDuplicates(log);
}

}  // namespace
}  // namespace tocl::testing
