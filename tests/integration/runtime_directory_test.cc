// Finding peers through the runtime: Runtime::Lookup, Query and
// WaitForQuery, over the process's own connection to its daemon, against
// threads enrolled by runtimes in this process and by tocl-msg-worker
// processes.
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "daemon_harness.h"
#include "messaging_support.h"
#include "status_assertions.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

std::vector<Gid> GidsOf(const std::vector<Entity>& entities) {
  std::vector<Gid> gids;
  for (const Entity& entity : entities) gids.push_back(entity.gid);
  return gids;
}

TEST_CASE("Lookup and Query find the threads of other processes through the runtime",
          "[integration][directory-api]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto finder = REQUIRE_VALUE(StartRuntime(daemon, "finder", "shm"));
  auto workers = REQUIRE_VALUE(StartRuntime(daemon, "workers", "shm"));
  std::vector<Gid> enrolled;
  for (int i = 0; i < 5; ++i) {
    enrolled.push_back(REQUIRE_VALUE(workers->EnrollThread(
        "w" + std::to_string(i), {{"role", "worker"}, {"shard", std::to_string(i % 2)}})));
  }
  const std::string workers_query = "kind=thread and role=worker";
  const std::vector<Entity> all =
      REQUIRE_VALUE(finder->WaitForQuery(workers_query, 5, seconds(30)));
  CHECK(GidsOf(all) == enrolled);  // Gid order, which is enrollment order here

  // Every match, or the first `limit` in Gid order.
  CHECK(GidsOf(REQUIRE_VALUE(finder->Query(workers_query))) == enrolled);
  CHECK(GidsOf(REQUIRE_VALUE(finder->Query(workers_query, 2))) ==
        std::vector<Gid>{enrolled[0], enrolled[1]});
  CHECK(GidsOf(REQUIRE_VALUE(finder->Query(workers_query + " and shard=1"))) ==
        std::vector<Gid>{enrolled[1], enrolled[3]});
  CHECK(REQUIRE_VALUE(finder->Query("kind=thread and role=nobody")).empty());
  CHECK(REQUIRE_VALUE(finder->Query("kind=process and name=workers")).front().gid ==
        workers->gid());

  const Entity third = REQUIRE_VALUE(finder->Lookup(enrolled[2]));
  CHECK(third.kind == EntityKind::kThread);
  CHECK(third.name == "w2");
  CHECK(third.state == EntityState::kRunning);
  CHECK(third.attributes == Attributes{{"role", "worker"}, {"shard", "0"}});
  CHECK(REQUIRE_VALUE(finder->Lookup(workers->gid())).name == "workers");
  CHECK(REQUIRE_VALUE(finder->Lookup(finder->gid().host())).kind == EntityKind::kHost);

  CHECK(finder->Lookup(Gid::Thread(workers->gid(), 4000)).status().code() == StatusCode::kNotFound);
  CHECK(finder->Lookup(Gid::Thread(Gid::Process(9, 1), 1)).status().code() ==
        StatusCode::kNotFound);
}

TEST_CASE("a query that does not parse is InvalidArgument naming the position, at once",
          "[integration][directory-api]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto runtime = REQUIRE_VALUE(StartRuntime(daemon, "asker", "shm"));
  struct Bad {
    std::string query;
    std::string says;
  };
  for (const Bad& bad : std::vector<Bad>{{"role=", "at position 5"},
                                         {"role merger", "at position 5"},
                                         {"name=\"abc", "at position 5"},
                                         {"role=a)", "at position 6"}}) {
    INFO(bad.query);
    auto queried = runtime->Query(bad.query);
    CHECK(queried.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(queried.status().message(), Catch::Contains(bad.says));
    const auto start = steady_clock::now();
    auto waited = runtime->WaitForQuery(bad.query, 1, seconds(30));
    CHECK(waited.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(waited.status().message(), Catch::Contains(bad.says));
    CHECK(steady_clock::now() - start < seconds(5));  // not the 30 s timeout
  }
  auto none = runtime->WaitForQuery("kind=thread", 0, seconds(30));
  CHECK(none.status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("WaitForQuery returns the first count matches once enough threads have enrolled",
          "[integration][directory-api]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto waiter = REQUIRE_VALUE(StartRuntime(daemon, "waiter", "shm"));
  auto late = REQUIRE_VALUE(StartRuntime(daemon, "late", "shm"));
  const std::string query = "kind=thread and role=late";

  auto waited =
      std::async(std::launch::async, [&] { return waiter->WaitForQuery(query, 3, seconds(60)); });
  // The waiter is asleep on the change stream, not finished.
  CHECK(waited.wait_for(milliseconds(200)) == std::future_status::timeout);
  std::vector<Gid> enrolled;
  for (int i = 0; i < 4; ++i) {
    enrolled.push_back(
        REQUIRE_VALUE(late->EnrollThread("l" + std::to_string(i), {{"role", "late"}})));
    // Changes that do not complete the match (and others' changes) are
    // looked at and waited past.
    REQUIRE_VALUE(late->EnrollThread("other" + std::to_string(i), {{"role", "other"}}));
  }
  REQUIRE(waited.wait_for(seconds(60)) == std::future_status::ready);
  const std::vector<Entity> found = REQUIRE_VALUE(waited.get());
  REQUIRE(found.size() == 3);
  // The first three in Gid order, whichever registration completed it.
  CHECK(GidsOf(found) == std::vector<Gid>{enrolled[0], enrolled[1], enrolled[2]});
  for (const Entity& entity : found) CHECK(entity.attributes.at("role") == "late");

  // Already satisfied: at once.
  CHECK(REQUIRE_VALUE(waiter->WaitForQuery(query, 4, seconds(30))).size() == 4);
}

TEST_CASE("WaitForQuery sees the threads of a separate process as they register",
          "[integration][directory-api]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto runtime = REQUIRE_VALUE(StartRuntime(daemon, "watcher", "shm"));
  MsgWorker worker = REQUIRE_VALUE(
      MsgWorker::Start(daemon, MsgWorkerArgs("idle", "busy").Subsystems("shm").Threads(16)));
  const std::vector<Entity> threads = REQUIRE_VALUE(runtime->WaitForQuery(
      "kind=thread and process=" + worker.process().ToString(), 16, seconds(30)));
  CHECK(GidsOf(threads) == worker.threads());
  CHECK(worker.Finish(seconds(30)).value_or(-1) == 0);
  // Its exit is a change too: a query on the state sees it.
  const std::vector<Entity> exited = REQUIRE_VALUE(
      runtime->WaitForQuery("kind=process and state=exited and name=busy", 1, seconds(30)));
  CHECK(exited.front().gid == worker.process());
}

TEST_CASE("WaitForQuery gives up at the timeout saying how many matched",
          "[integration][directory-api]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto runtime = REQUIRE_VALUE(StartRuntime(daemon, "patient", "shm"));
  REQUIRE_VALUE(runtime->EnrollThread("only", {{"role", "rare"}}));
  REQUIRE_VALUE(runtime->WaitForQuery("role=rare", 1, seconds(30)));

  auto waited = runtime->WaitForQuery("role=rare", 2, milliseconds(300));
  INFO(waited.status().ToString());
  CHECK(waited.status().code() == StatusCode::kDeadlineExceeded);
  CHECK_THAT(waited.status().message(), Catch::Contains("1 of the 2"));
  CHECK_THAT(waited.status().message(), Catch::Contains("role=rare"));
  // No time at all: one look.
  CHECK(runtime->WaitForQuery("role=rare", 2, milliseconds(0)).status().code() ==
        StatusCode::kDeadlineExceeded);
  CHECK(REQUIRE_VALUE(runtime->WaitForQuery("role=rare", 1, milliseconds(0))).size() == 1);
}

TEST_CASE("Shutdown ends a WaitForQuery that is waiting, with Cancelled",
          "[integration][directory-api]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto runtime = REQUIRE_VALUE(StartRuntime(daemon, "leaving", "shm"));
  auto waited = std::async(std::launch::async, [&] {
    return runtime->WaitForQuery("kind=thread and role=never", 1, seconds(600));
  });
  CHECK(waited.wait_for(milliseconds(200)) == std::future_status::timeout);
  REQUIRE_OK(runtime->Shutdown());
  REQUIRE(waited.wait_for(seconds(30)) == std::future_status::ready);
  CHECK(waited.get().status().code() == StatusCode::kCancelled);
  CHECK(runtime->Query("kind=thread").status().code() == StatusCode::kUnavailable);
  CHECK(runtime->WaitForQuery("kind=host", 1, seconds(1)).status().code() ==
        StatusCode::kCancelled);
}

TEST_CASE("WaitForQuery waits through a daemon restart", "[integration][directory-api]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto waiter = REQUIRE_VALUE(StartRuntime(daemon, "steadfast", "shm"));
  auto waited = std::async(std::launch::async, [&] {
    return waiter->WaitForQuery("kind=process and name=after-restart", 1, seconds(60));
  });
  CHECK(waited.wait_for(milliseconds(200)) == std::future_status::timeout);
  REQUIRE(daemon.Stop().value_or(-1) == 0);
  REQUIRE_OK(daemon.Start());
  auto newcomer = REQUIRE_VALUE(StartRuntime(daemon, "after-restart", "shm"));
  REQUIRE(waited.wait_for(seconds(60)) == std::future_status::ready);
  const std::vector<Entity> found = REQUIRE_VALUE(waited.get());
  CHECK(found.front().gid == newcomer->gid());
}

}  // namespace
}  // namespace tocl::testing
