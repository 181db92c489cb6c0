// The retention part of the Store (store_retention.cc): exited entities
// removed after their time, in bounded batches, with REMOVED changes that
// replicas follow, and the tombstones Lookup answers afterwards. Real stores
// on temporary files.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "store/rows.h"
#include "store/sqlite.h"
#include "store/store.h"
#include "store_fixtures.h"
#include "temp_dir.h"

namespace tocl::directory {
namespace {

using tocl::testing::TempDir;

// Far enough in the future that every exit so far is before it.
constexpr int64_t kEverything = INT64_MAX;

void Publish(Store& store, const Enrollment& process, const std::string& subsystem) {
  pb::PublishEndpointRequest request;
  request.set_process(process.gid.raw());
  request.set_session_token(process.session_token);
  request.mutable_endpoint()->set_subsystem(subsystem);
  request.mutable_endpoint()->set_address("address-of-" + subsystem);
  REQUIRE(store.PublishEndpoint(request).status().message() == "");
}

// A process as a short-lived program leaves it: attributes, two endpoints,
// `threads` threads, exited.
Enrollment ShortLived(Store& store, const std::string& name, uint32_t threads) {
  Enrollment process = Enroll(store, name);
  Publish(store, process, "shm");
  Publish(store, process, "tcp");
  RegisterThreads(store, process, 1, threads);
  REQUIRE(store.MarkProcessExited(process.gid, "done").message() == "");
  return process;
}

int64_t CountRows(const std::string& path, const std::string& sql) {
  Result<Database> db = Database::Open(path, OpenMode::kReadOnly);
  REQUIRE(db.status().message() == "");
  Result<int64_t> count = db->QueryInt(sql);
  REQUIRE(count.status().message() == "");
  return *count;
}

Removal RemoveOk(Store& store, int64_t cutoff_us, size_t max_entities = 1000) {
  Result<Removal> removal = store.RemoveExited(cutoff_us, max_entities);
  REQUIRE(removal.status().message() == "");
  return *removal;
}

std::vector<pb::ChangeEvent> Changes(Store& store, uint64_t since) {
  Result<std::vector<pb::ChangeEvent>> changes = store.ChangesSince(since, 100'000);
  REQUIRE(changes.status().message() == "");
  return *changes;
}

size_t QueryCount(Store& store, const std::string& expression) {
  Result<pb::QueryResponse> page = store.Query(expression, 10'000, "");
  REQUIRE(page.status().message() == "");
  return static_cast<size_t>(page->entities_size());
}

void RequireTombstone(Store& store, Gid gid, const std::string& reason) {
  Result<pb::Entity> entity = store.Lookup(gid);
  INFO(gid.ToString() << ": " << entity.status().ToString());
  REQUIRE(entity.ok());
  CHECK(entity->removed());
  CHECK(entity->state() == pb::EXITED);
  CHECK(entity->gid() == gid.raw());
  CHECK(entity->name().empty());
  CHECK(entity->exit_reason() == reason);
}

TEST_CASE("an exited process goes with its threads, attributes and endpoints once due",
          "[store][retention]") {
  TempDir dir("store-retention-");
  auto store = OpenHost(dir, 1);
  const std::string path = dir.path() + "/h1.db";
  Enrollment process = ShortLived(*store, "short", 7);
  const int64_t exited_at = store->Lookup(process.gid).value().exited_at_us();
  REQUIRE(CountRows(path, "SELECT count(*) FROM threads") == 7);

  // Not yet due: nothing happens, and the probe says so.
  CHECK_FALSE(store->HasExitedBefore(exited_at).value_or(true));
  Removal none = RemoveOk(*store, exited_at);
  CHECK(none.processes.empty());
  CHECK(none.threads == 0);
  CHECK_FALSE(none.more);
  const uint64_t head = store->head_seq();

  REQUIRE(store->HasExitedBefore(exited_at + 1).value_or(false));
  Removal removal = RemoveOk(*store, exited_at + 1);
  REQUIRE(removal.processes == std::vector<Gid>{process.gid});
  CHECK(removal.threads == 7);
  CHECK_FALSE(removal.more);
  CHECK_FALSE(store->HasExitedBefore(kEverything).value_or(true));

  CHECK(CountRows(path, "SELECT count(*) FROM processes") == 0);
  CHECK(CountRows(path, "SELECT count(*) FROM threads") == 0);
  CHECK(CountRows(path, "SELECT count(*) FROM endpoints") == 0);
  // The host's own attribute (networks) is all that is left.
  CHECK(CountRows(path, "SELECT count(*) FROM attributes WHERE entity != " +
                            std::to_string(StoredGid(store->host()))) == 0);
  CHECK(QueryCount(*store, "kind=process") == 0);
  CHECK(QueryCount(*store, "kind=thread") == 0);

  // One REMOVED change, for the process: it covers the threads.
  std::vector<pb::ChangeEvent> changes = Changes(*store, head);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].op() == pb::CHANGE_OP_REMOVED);
  CHECK(changes[0].gid() == process.gid.raw());
  CHECK(changes[0].entity().removed());
  CHECK(changes[0].entity().kind() == pb::PROCESS);

  // Older changes of the process now carry its tombstone.
  for (const pb::ChangeEvent& event : Changes(*store, 0)) {
    if (Gid::FromRaw(event.gid()).host() == store->host() && !Gid::FromRaw(event.gid()).is_host()) {
      CHECK(event.entity().removed());
    }
  }

  RequireTombstone(*store, process.gid, kRemovedReason);
  RequireTombstone(*store, Gid::Thread(process.gid, 3),
                   "its process " + process.gid.ToString() + " " + kRemovedReason);
}

TEST_CASE("process ids are not reused after their processes were removed", "[store][retention]") {
  TempDir dir("store-retention-");
  auto store = OpenHost(dir, 1);
  Enrollment first = ShortLived(*store, "first", 1);
  REQUIRE(RemoveOk(*store, kEverything).processes.size() == 1);
  Enrollment second = Enroll(*store, "second");
  CHECK(second.gid.process_index() == first.gid.process_index() + 1);
  // And after a restart, which reads the counter back from the database.
  store.reset();
  store = OpenHost(dir, 1);
  REQUIRE(store->MarkProcessExited(second.gid, "done").message() == "");
  REQUIRE(RemoveOk(*store, kEverything).processes.size() == 1);
  Enrollment third = Enroll(*store, "third");
  CHECK(third.gid.process_index() == second.gid.process_index() + 1);
}

TEST_CASE("ids that never existed stay NotFound and running entities are never removed",
          "[store][retention]") {
  TempDir dir("store-retention-");
  auto store = OpenHost(dir, 1);
  Enrollment running = Enroll(*store, "running");
  RegisterThreads(*store, running, 1, 4);
  CHECK(RemoveOk(*store, kEverything).processes.empty());
  CHECK(store->Lookup(running.gid).value().state() == pb::RUNNING);
  CHECK(QueryCount(*store, "kind=thread and state=running") == 4);

  // Beyond the process counter: never handed out.
  Result<pb::Entity> never = store->Lookup(Gid::Process(1, running.gid.process_index() + 1));
  CHECK(never.status().code() == StatusCode::kNotFound);
  // A thread id the running process never registered proves nothing.
  Result<pb::Entity> unregistered = store->Lookup(Gid::Thread(running.gid, 99));
  CHECK(unregistered.status().code() == StatusCode::kNotFound);
}

TEST_CASE("a thread that exited while its process runs is removed on its own, with its change",
          "[store][retention]") {
  TempDir dir("store-retention-");
  auto store = OpenHost(dir, 1);
  Enrollment process = Enroll(*store, "pool");
  RegisterThreads(*store, process, 1, 3);
  pb::UnregisterThreadsRequest unregister;
  unregister.set_process(process.gid.raw());
  unregister.set_session_token(process.session_token);
  unregister.add_threads(Gid::Thread(process.gid, 2).raw());
  REQUIRE(store->UnregisterThreads(unregister).status().message() == "");
  const uint64_t head = store->head_seq();

  Removal removal = RemoveOk(*store, kEverything);
  CHECK(removal.processes.empty());
  CHECK(removal.threads == 1);
  std::vector<pb::ChangeEvent> changes = Changes(*store, head);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].op() == pb::CHANGE_OP_REMOVED);
  CHECK(changes[0].gid() == Gid::Thread(process.gid, 2).raw());
  CHECK(store->Lookup(Gid::Thread(process.gid, 2)).status().code() == StatusCode::kNotFound);
  CHECK(QueryCount(*store, "kind=thread") == 2);
  CHECK(store->Lookup(process.gid).value().state() == pb::RUNNING);
}

TEST_CASE("a process with more threads than one batch is removed over several calls",
          "[store][retention]") {
  TempDir dir("store-retention-");
  auto store = OpenHost(dir, 1);
  Enrollment big = Enroll(*store, "big");
  for (uint32_t first = 1; first <= 2500; first += 500) RegisterThreads(*store, big, first, 500);
  Enrollment small = ShortLived(*store, "small", 2);
  REQUIRE(store->MarkProcessExited(big.gid, "done").message() == "");

  // Oldest exit first: the small one, then a slice of the big one's threads.
  Removal first = RemoveOk(*store, kEverything, 1000);
  CHECK(first.processes == std::vector<Gid>{small.gid});
  CHECK(first.threads == 2 + 997);
  CHECK(first.more);
  // The big process is still there, exited, with its remaining threads.
  CHECK(store->Lookup(big.gid).value().state() == pb::EXITED);
  CHECK(QueryCount(*store, "kind=thread") == 2500 - 997);

  std::vector<Removal> rest;
  for (int calls = 0; calls < 10; ++calls) {
    rest.push_back(RemoveOk(*store, kEverything, 1000));
    if (!rest.back().more) break;
  }
  REQUIRE(rest.size() == 2);  // 1000 threads, then 503 and the process
  CHECK(rest[1].processes == std::vector<Gid>{big.gid});
  CHECK(QueryCount(*store, "kind=thread") == 0);
  RequireTombstone(*store, big.gid, kRemovedReason);
}

TEST_CASE("the sweep's queries use the exited-entity indexes, not a table scan",
          "[store][retention]") {
  TempDir dir("store-retention-");
  OpenHost(dir, 1).reset();
  Result<Database> db = Database::Open(dir.path() + "/h1.db", OpenMode::kReadOnly);
  REQUIRE(db.ok());
  for (const std::string& table : std::vector<std::string>{"processes", "threads"}) {
    Result<Statement> plan =
        db->Prepare("EXPLAIN QUERY PLAN SELECT gid FROM " + table +
                    " WHERE state = 2 AND (gid >> 48) = (?1 >> 48) AND exited_at_us < ?2 "
                    "ORDER BY exited_at_us LIMIT ?3");
    REQUIRE(plan.ok());
    std::string details;
    while (plan->Step().value_or(false)) details += std::string(plan->ColumnText(3)) + "; ";
    INFO(details);
    CHECK_THAT(details, Catch::Contains("USING INDEX " + table + "_exited"));
    CHECK_THAT(details, !Catch::Contains("TEMP B-TREE"));
  }
}

TEST_CASE("a replica removes another host's rows only when that host says so",
          "[store][retention][cluster]") {
  TempDir dir("store-retention-");
  auto origin = OpenHost(dir, 1);
  auto replica = OpenHost(dir, 2);
  Enrollment process = ShortLived(*origin, "short", 3);
  Replicate(*origin, *replica);
  REQUIRE(replica->Lookup(process.gid).value().state() == pb::EXITED);
  REQUIRE(QueryCount(*replica, "kind=thread") == 3);

  // The replica's own sweep leaves other hosts' rows alone.
  CHECK(RemoveOk(*replica, kEverything).processes.empty());
  CHECK(QueryCount(*replica, "kind=thread") == 3);

  const uint64_t replica_head = replica->head_seq();
  REQUIRE(RemoveOk(*origin, kEverything).processes.size() == 1);
  Replicate(*origin, *replica);
  CHECK(QueryCount(*replica, "kind=process") == 0);
  CHECK(QueryCount(*replica, "kind=thread") == 0);
  CHECK(CountRows(dir.path() + "/h2.db", "SELECT count(*) FROM endpoints") == 0);
  RequireTombstone(*replica, process.gid, kRemovedReason);
  RequireTombstone(*replica, Gid::Thread(process.gid, 1),
                   "its process " + process.gid.ToString() + " " + kRemovedReason);
  // Local watchers of the replica see the removal.
  std::vector<pb::ChangeEvent> changes = Changes(*replica, replica_head);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].op() == pb::CHANGE_OP_REMOVED);
  CHECK(changes[0].gid() == process.gid.raw());
  // An id the origin never handed out is still unknown there.
  CHECK(replica->Lookup(Gid::Process(1, process.gid.process_index() + 1)).status().code() ==
        StatusCode::kNotFound);
}

TEST_CASE("a replica that catches up after a removal never holds the removed rows",
          "[store][retention][cluster]") {
  TempDir dir("store-retention-");
  auto origin = OpenHost(dir, 1);
  auto replica = OpenHost(dir, 2);
  Enrollment process = ShortLived(*origin, "short", 3);
  REQUIRE(RemoveOk(*origin, kEverything).processes.size() == 1);
  // Its ADDED and EXITED changes now carry tombstones: applied, they leave
  // no row behind.
  Replicate(*origin, *replica);
  CHECK(QueryCount(*replica, "kind=process") == 0);
  CHECK(QueryCount(*replica, "kind=thread") == 0);
  RequireTombstone(*replica, process.gid, kRemovedReason);
}

}  // namespace
}  // namespace tocl::directory
