// The cluster part of the Store (store_cluster.cc): host ids handed out by
// the seed, members, applying another host's changes and snapshots,
// reachability, change-log trimming. Two real stores on temporary files
// play origin and replica.
#include <catch2/catch.hpp>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "store/store.h"
#include "store_fixtures.h"
#include "temp_dir.h"

namespace tocl::directory {
namespace {

using tocl::testing::TempDir;

std::vector<std::string> QueryAll(Store& store, const std::string& expression) {
  std::vector<std::string> found;
  std::string token;
  do {
    Result<pb::QueryResponse> page = store.Query(expression, 7, token);
    REQUIRE(page.status().message() == "");
    for (const pb::Entity& entity : page->entities()) {
      found.push_back(Gid::FromRaw(entity.gid()).ToString() + " " + entity.name() + " " +
                      pb::EntityState_Name(entity.state()) + " " +
                      std::to_string(entity.attributes_size()));
    }
    token = page->next_page_token();
  } while (!token.empty());
  return found;
}

TEST_CASE("the seed gives a node key its id back, a free wanted id, else the lowest free id",
          "[store][cluster]") {
  TempDir dir("store-cluster-");
  auto seed = OpenHost(dir, 1);
  const std::string key_a(32, 'a'), key_b(32, 'b'), key_c(32, 'c'), key_d(32, 'd');

  REQUIRE(seed->AssignMember(key_a, "node-1", "10.0.0.1:7390", Gid::Host(1)).value_or(Gid()) ==
          Gid::Host(1));
  CHECK(seed->AssignMember(key_b, "node-b", "10.0.0.2:7390", Gid()).value_or(Gid()) ==
        Gid::Host(2));
  CHECK(seed->AssignMember(key_c, "node-c", "10.0.0.3:7390", Gid::Host(7)).value_or(Gid()) ==
        Gid::Host(7));
  // A rejoin keeps the id, whatever it asks for, and takes the new address.
  CHECK(seed->AssignMember(key_b, "node-b", "10.0.0.9:7390", Gid()).value_or(Gid()) ==
        Gid::Host(2));
  CHECK(seed->Lookup(Gid::Host(2)).value().address() == "10.0.0.9:7390");

  Result<Gid> taken = seed->AssignMember(key_d, "node-d", "10.0.0.4:7390", Gid::Host(2));
  CHECK(taken.status().code() == StatusCode::kAlreadyExists);
  CHECK_THAT(taken.status().message(),
             Catch::Contains("h2") && Catch::Contains("node-b") && Catch::Contains("10.0.0.9"));
  CHECK(seed->AssignMember(key_d, "node-d", "10.0.0.4:7390", Gid()).value_or(Gid()) ==
        Gid::Host(3));

  Result<std::vector<MemberRow>> members = seed->Members();
  REQUIRE(members.ok());
  std::vector<uint32_t> ids;
  for (const MemberRow& member : *members) ids.push_back(member.host.host_index());
  CHECK(ids == std::vector<uint32_t>{1, 2, 3, 7});
  // Every member is a host the directory lists.
  CHECK(QueryAll(*seed, "kind=host").size() == 4);
}

TEST_CASE("members learned by gossip get host rows with their address, and this host is skipped",
          "[store][cluster]") {
  TempDir dir("store-cluster-");
  auto store = OpenHost(dir, 3);
  std::vector<MemberRow> rows = {{Gid::Host(1), "node-1", "10.0.0.1:7390"},
                                 {Gid::Host(3), "impostor", "10.9.9.9:1"},
                                 {Gid::Host(5), "node-5", "10.0.0.5:7390"}};
  REQUIRE(store->SaveMembers(rows).message() == "");
  REQUIRE(store->SetOwnAddress("10.0.0.3:7390").message() == "");
  CHECK(store->Lookup(Gid::Host(5)).value().address() == "10.0.0.5:7390");
  CHECK(store->Lookup(Gid::Host(3)).value().name() == "node-3");
  CHECK(store->Lookup(Gid::Host(3)).value().address() == "10.0.0.3:7390");

  Result<std::vector<MemberRow>> members = store->Members();
  REQUIRE(members.ok());
  REQUIRE(members->size() == 3);
  CHECK(members->at(1).host == Gid::Host(3));
  CHECK(members->at(1).address == "10.0.0.3:7390");
  CHECK(QueryAll(*store, "kind=host") == std::vector<std::string>{"h1 node-1 RUNNING 0",
                                                                  "h3 node-3 RUNNING 0",
                                                                  "h5 node-5 RUNNING 0"});
}

TEST_CASE("another host's changes are applied with their progress and queried like own rows",
          "[store][cluster]") {
  TempDir dir("store-cluster-");
  auto origin = OpenHost(dir, 2);
  auto replica = OpenHost(dir, 1);
  Enrollment process = Enroll(*origin, "merger");
  RegisterThreads(*origin, process, 1, 250);

  const uint64_t applied = Replicate(*origin, *replica);
  CHECK(applied == origin->head_seq());
  CHECK(replica->ReplicaProgress(Gid::Host(2)).value_or(0) == applied);
  CHECK(QueryAll(*replica, "host=h2") == QueryAll(*origin, "host=h2"));
  CHECK(QueryAll(*replica, "kind=thread and shard=1 and host=h2").size() == 84);
  CHECK(replica->Lookup(process.gid).value().attributes(0).value() == "worker");

  // Changes after the progress are applied as updates.
  pb::UnregisterThreadsRequest unregister;
  unregister.set_process(process.gid.raw());
  unregister.set_session_token(process.session_token);
  unregister.add_threads(Gid::Thread(process.gid, 5).raw());
  REQUIRE(origin->UnregisterThreads(unregister).status().message() == "");
  Replicate(*origin, *replica);
  CHECK(replica->Lookup(Gid::Thread(process.gid, 5)).value().state() == pb::EXITED);

  // The replica holds no session token: nobody writes for h2's process here.
  pb::RegisterThreadsRequest steal;
  steal.set_process(process.gid.raw());
  steal.set_session_token(process.session_token);
  pb::ThreadRegistration* thread = steal.add_threads();
  thread->set_gid(Gid::Thread(process.gid, 999).raw());
  thread->set_name("stolen");
  CHECK(replica->RegisterThreads(steal).status().code() == StatusCode::kPermissionDenied);
}

TEST_CASE("replicated changes reach local watchers but are not offered to other replicas",
          "[store][cluster]") {
  TempDir dir("store-cluster-");
  auto origin = OpenHost(dir, 2);
  auto replica = OpenHost(dir, 1);
  Enrollment own = Enroll(*replica, "local");
  Enroll(*origin, "remote");
  Replicate(*origin, *replica);

  Result<std::vector<pb::ChangeEvent>> all = replica->ChangesSince(0, 1000);
  Result<std::vector<pb::ChangeEvent>> offered = replica->OwnChangesSince(0, 1000);
  REQUIRE(all.ok());
  REQUIRE(offered.ok());
  bool watcher_sees_remote = false;
  for (const pb::ChangeEvent& event : *all) {
    if (Gid::FromRaw(event.gid()).host() == Gid::Host(2)) watcher_sees_remote = true;
  }
  CHECK(watcher_sees_remote);
  REQUIRE_FALSE(offered->empty());
  for (const pb::ChangeEvent& event : *offered) {
    CHECK(Gid::FromRaw(event.gid()).host() == Gid::Host(1));
  }
  CHECK(offered->back().gid() == own.gid.raw());
}

TEST_CASE("a batch naming an entity of another host is refused whole", "[store][cluster]") {
  TempDir dir("store-cluster-");
  auto origin = OpenHost(dir, 2);
  auto intruder = OpenHost(dir, 3);
  auto replica = OpenHost(dir, 1);
  Enroll(*origin, "honest");
  Enrollment foreign = Enroll(*intruder, "foreign");

  std::vector<pb::ChangeEvent> events = origin->OwnChangesSince(0, 100).value();
  events.push_back(intruder->OwnChangesSince(0, 100).value().back());
  Status refused = replica->ApplyReplicated(Gid::Host(2), events, 99);
  CHECK(refused.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(refused.message(), Catch::Contains(foreign.gid.ToString()));
  // Nothing of the batch was applied, the progress did not move.
  CHECK(replica->ReplicaProgress(Gid::Host(2)).value_or(1) == 0);
  CHECK(replica->Lookup(Gid::Process(2, 1)).status().code() == StatusCode::kNotFound);
  // Its own host is never replicated into a store.
  CHECK(replica->ApplyReplicated(Gid::Host(1), {}, 5).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("a snapshot replaces a host's rows and removes the ones it does not name",
          "[store][cluster]") {
  TempDir dir("store-cluster-");
  auto replica = OpenHost(dir, 1);
  {
    // The origin as it was: two processes with threads.
    auto old_origin = OpenHost(dir, 2);
    Enrollment first = Enroll(*old_origin, "first");
    RegisterThreads(*old_origin, first, 1, 20);
    Enrollment second = Enroll(*old_origin, "second");
    RegisterThreads(*old_origin, second, 1, 5);
    Replicate(*old_origin, *replica);
  }
  REQUIRE(QueryAll(*replica, "host=h2").size() == 28);

  // The origin lost its database: one process with three threads now.
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::filesystem::remove(dir.path() + "/h2.db" + suffix);
  }
  auto origin = OpenHost(dir, 2);
  Enrollment again = Enroll(*origin, "again");
  RegisterThreads(*origin, again, 1, 3);

  REQUIRE(replica->BeginSnapshot(Gid::Host(2)).message() == "");
  Gid after;
  for (;;) {
    std::vector<pb::Entity> page = origin->OwnEntitiesAfter(after, 2).value();
    if (page.empty()) break;
    std::vector<pb::ChangeEvent> events;
    for (const pb::Entity& entity : page) {
      pb::ChangeEvent& event = events.emplace_back();
      event.set_op(pb::CHANGE_OP_ADDED);
      event.set_gid(entity.gid());
      *event.mutable_entity() = entity;
      after = Gid::FromRaw(entity.gid());
    }
    REQUIRE(replica->ApplySnapshot(Gid::Host(2), events).message() == "");
  }
  REQUIRE(replica->FinishSnapshot(Gid::Host(2), origin->head_seq()).message() == "");

  CHECK(QueryAll(*replica, "host=h2") == QueryAll(*origin, "host=h2"));
  CHECK(replica->Lookup(Gid::Thread(Gid::Process(2, 1), 10)).status().code() ==
        StatusCode::kNotFound);
  CHECK(replica->Lookup(Gid::Process(2, 2)).status().code() == StatusCode::kNotFound);
  CHECK(replica->ReplicaProgress(Gid::Host(2)).value_or(0) == origin->head_seq());
  // No change in the log names a removed entity: a watcher reads them all.
  CHECK(replica->ChangesSince(0, 100'000).status().message() == "");
}

TEST_CASE("a snapshot page out of gid order, or one before its snapshot began, is refused",
          "[store][cluster]") {
  TempDir dir("store-cluster-");
  auto origin = OpenHost(dir, 2);
  auto replica = OpenHost(dir, 1);
  Enroll(*origin, "a");
  std::vector<pb::Entity> entities = origin->OwnEntitiesAfter(Gid(), 10).value();
  REQUIRE(entities.size() == 2);
  std::vector<pb::ChangeEvent> events(2);
  for (size_t i = 0; i < 2; ++i) {
    events[i].set_gid(entities[1 - i].gid());
    *events[i].mutable_entity() = entities[1 - i];
  }
  CHECK(replica->ApplySnapshot(Gid::Host(2), events).code() == StatusCode::kFailedPrecondition);
  REQUIRE(replica->BeginSnapshot(Gid::Host(2)).message() == "");
  CHECK(replica->ApplySnapshot(Gid::Host(2), events).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("a host marked unreachable makes its running entities read UNREACHABLE, once",
          "[store][cluster]") {
  TempDir dir("store-cluster-");
  auto origin = OpenHost(dir, 2);
  auto replica = OpenHost(dir, 1);
  Enrollment running = Enroll(*origin, "running");
  Enrollment gone = Enroll(*origin, "gone");
  REQUIRE(origin->MarkProcessExited(gone.gid, "test").message() == "");
  Replicate(*origin, *replica);

  const uint64_t before = replica->head_seq();
  REQUIRE(replica->SetReachable(Gid::Host(2), false).message() == "");
  REQUIRE(replica->SetReachable(Gid::Host(2), false).message() == "");
  CHECK(replica->head_seq() == before + 1);  // one change for the host, none per entity
  CHECK(replica->Lookup(Gid::Host(2)).value().state() == pb::UNREACHABLE);
  CHECK(replica->Lookup(running.gid).value().state() == pb::UNREACHABLE);
  CHECK(replica->Lookup(gone.gid).value().state() == pb::EXITED);
  std::vector<pb::ChangeEvent> events = replica->ChangesSince(before, 10).value();
  REQUIRE(events.size() == 1);
  CHECK(events[0].op() == pb::CHANGE_OP_UNREACHABLE);
  CHECK(events[0].gid() == Gid::Host(2).raw());
  // Reachability is this daemon's own view: never offered to replicas.
  const std::vector<pb::ChangeEvent> own = replica->OwnChangesSince(0, 100).value();
  for (const pb::ChangeEvent& event : own) CHECK(event.op() != pb::CHANGE_OP_UNREACHABLE);

  REQUIRE(replica->SetReachable(Gid::Host(2), true).message() == "");
  CHECK(replica->Lookup(running.gid).value().state() == pb::RUNNING);
  CHECK(replica->ChangesSince(before + 1, 10).value().at(0).op() == pb::CHANGE_OP_REACHABLE);
  // The origin's own view of itself is unchanged.
  CHECK(origin->Lookup(running.gid).value().state() == pb::RUNNING);
}

TEST_CASE("trimming keeps the newest changes and says how far it trimmed", "[store][cluster]") {
  TempDir dir("store-cluster-");
  auto store = OpenHost(dir, 1);
  Enrollment process = Enroll(*store, "p");
  RegisterThreads(*store, process, 1, 50);
  const uint64_t head = store->head_seq();
  CHECK(store->TrimmedThrough().value_or(1) == 0);

  Result<uint64_t> deleted = store->TrimChangeLog(10);
  REQUIRE(deleted.ok());
  CHECK(*deleted == head - 10);
  CHECK(store->TrimmedThrough().value_or(0) == head - 10);
  std::vector<pb::ChangeEvent> left = store->ChangesSince(0, 1000).value();
  REQUIRE(left.size() == 10);
  CHECK(left.front().seq() == head - 9);
  CHECK(store->TrimChangeLog(10).value_or(1) == 0);  // nothing more to do
  CHECK(store->TrimChangeLog(0).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("the recorded host id is read from a database before it is opened", "[store][cluster]") {
  TempDir dir("store-cluster-");
  CHECK(Store::RecordedHostId(dir.path() + "/h9.db").value_or(1) == 0);
  OpenHost(dir, 9).reset();
  CHECK(Store::RecordedHostId(dir.path() + "/h9.db").value_or(0) == 9);
}

}  // namespace
}  // namespace tocl::directory

namespace tocl::directory {
namespace {

TEST_CASE("nobody writes for another host's process through this daemon, with or without a token",
          "[store][cluster]") {
  TempDir dir;
  auto origin = OpenHost(dir, 2);
  auto replica = OpenHost(dir, 1);
  const Enrollment remote = Enroll(*origin, "remote");
  Replicate(*origin, *replica);
  REQUIRE(replica->Lookup(remote.gid).ok());

  pb::RegisterThreadsRequest request;
  request.set_process(remote.gid.raw());
  pb::ThreadRegistration* thread = request.add_threads();
  thread->set_gid(Gid::Thread(remote.gid, 9).raw());
  thread->set_name("intruder");
  // An empty token once matched the NULL token of a replicated row.
  CHECK(replica->RegisterThreads(request).status().code() == StatusCode::kPermissionDenied);
  request.set_session_token(remote.session_token);  // even the right one: wrong daemon
  CHECK(replica->RegisterThreads(request).status().code() == StatusCode::kPermissionDenied);

  pb::PublishEndpointRequest endpoint;
  endpoint.set_process(remote.gid.raw());
  endpoint.mutable_endpoint()->set_subsystem("tcp");
  endpoint.mutable_endpoint()->set_address("10.0.0.66:1");
  CHECK(replica->PublishEndpoint(endpoint).status().code() == StatusCode::kPermissionDenied);
  // Nothing was written: no own change names it.
  auto own = replica->OwnChangesSince(0, 1000);
  REQUIRE(own.ok());
  for (const pb::ChangeEvent& event : *own) CHECK(Gid::FromRaw(event.gid()).host() == Gid::Host(1));
  // And this host's own processes still need their token.
  const Enrollment local = Enroll(*replica, "local");
  pb::RegisterThreadsRequest tokenless;
  tokenless.set_process(local.gid.raw());
  pb::ThreadRegistration* mine = tokenless.add_threads();
  mine->set_gid(Gid::Thread(local.gid, 1).raw());
  mine->set_name("t1");
  CHECK(replica->RegisterThreads(tokenless).status().code() == StatusCode::kPermissionDenied);
}

TEST_CASE("reachability changes are never part of a replication stream or a snapshot",
          "[store][cluster]") {
  TempDir dir;
  auto replica = OpenHost(dir, 1);
  auto origin = OpenHost(dir, 2);
  const Enrollment local = Enroll(*replica, "local");
  pb::ChangeEvent forged;
  forged.set_seq(1);
  forged.set_op(pb::CHANGE_OP_REACHABLE);
  forged.set_gid(Gid::Host(2).raw());
  forged.mutable_entity()->set_gid(local.gid.raw());  // would overwrite a local row
  forged.mutable_entity()->set_kind(pb::PROCESS);
  forged.mutable_entity()->set_name("forged");
  std::vector<pb::ChangeEvent> events = {forged};
  CHECK(replica->ApplyReplicated(Gid::Host(2), events, 1).code() == StatusCode::kInvalidArgument);
  REQUIRE(replica->BeginSnapshot(Gid::Host(2)).ok());
  CHECK(replica->ApplySnapshot(Gid::Host(2), events).code() == StatusCode::kInvalidArgument);
  auto still = replica->Lookup(local.gid);
  REQUIRE(still.ok());
  CHECK(still->name() == "local");
}

}  // namespace
}  // namespace tocl::directory
