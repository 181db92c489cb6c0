#include "store/store.h"

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "store/schema.h"
#include "store/sqlite.h"
#include "temp_dir.h"
#include "tocl/entity.h"

namespace tocl::directory {
namespace {

using namespace std::chrono_literals;

using tocl::testing::TempDir;

std::unique_ptr<Store> OpenStore(const std::string& path, std::string host_name = "node-a") {
  Result<std::unique_ptr<Store>> store = Store::Open(StoreOptions{path, std::move(host_name)});
  REQUIRE(store.status().message() == "");
  return std::move(store).value();
}

Enrollment Enroll(Store& store, std::string name = "worker", int64_t pid = 4242) {
  pb::EnrollRegister request;
  request.set_name(std::move(name));
  request.set_os_pid(pid);
  Result<Enrollment> enrollment = store.EnrollProcess(request);
  REQUIRE(enrollment.status().message() == "");
  return *enrollment;
}

pb::RegisterThreadsRequest ThreadsRequest(const Enrollment& process,
                                          const std::vector<uint32_t>& thread_indexes) {
  pb::RegisterThreadsRequest request;
  request.set_process(process.gid.raw());
  request.set_session_token(process.session_token);
  for (uint32_t index : thread_indexes) {
    pb::ThreadRegistration* thread = request.add_threads();
    thread->set_gid(Gid::Thread(process.gid, index).raw());
    thread->set_name("thread-" + std::to_string(index));
  }
  return request;
}

Gid ThreadOf(const Enrollment& process, uint32_t index) {
  return Gid::Thread(process.gid, index);
}

uint64_t RegisterOk(Store& store, const pb::RegisterThreadsRequest& request) {
  Result<uint64_t> seq = store.RegisterThreads(request);
  REQUIRE(seq.status().message() == "");
  return *seq;
}

void AddAttribute(pb::ThreadRegistration* thread, std::string key, std::string value) {
  pb::Attribute* attribute = thread->add_attributes();
  attribute->set_key(std::move(key));
  attribute->set_value(std::move(value));
}

bool Exists(Store& store, Gid gid) {
  Result<pb::Entity> entity = store.Lookup(gid);
  if (!entity.ok()) REQUIRE(entity.status().code() == StatusCode::kNotFound);
  return entity.ok();
}

void RequireCode(const Status& status, StatusCode code, std::string_view mentions = "") {
  INFO("status: " << status.ToString());
  REQUIRE(status.code() == code);
  CHECK_THAT(status.message(), Catch::Contains(std::string(mentions)));
}

std::vector<pb::ChangeEvent> Changes(Store& store, uint64_t since, size_t max = 10'000) {
  Result<std::vector<pb::ChangeEvent>> changes = store.ChangesSince(since, max);
  REQUIRE(changes.status().message() == "");
  return *changes;
}

TEST_CASE("opening a new store registers this host as h1 under its name", "[store]") {
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"), "node-a");
  CHECK(store->host() == Gid::Host(1));
  CHECK(store->host_name() == "node-a");

  Result<pb::Entity> host = store->Lookup(Gid::Host(1));
  REQUIRE(host.ok());
  CHECK(host->kind() == pb::HOST);
  CHECK(host->name() == "node-a");
  CHECK(host->state() == pb::RUNNING);
  CHECK(host->started_at_us() > 0);

  CHECK(store->head_seq() == 1);
  std::vector<pb::ChangeEvent> changes = Changes(*store, 0);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].seq() == 1);
  CHECK(changes[0].op() == pb::CHANGE_OP_ADDED);
  CHECK(changes[0].gid() == Gid::Host(1).raw());
  CHECK(changes[0].entity().name() == "node-a");
}

TEST_CASE("reopening with another host name renames the host and logs an update", "[store]") {
  TempDir dir;
  std::string path = dir.File("directory.db");
  OpenStore(path, "node-a").reset();
  auto store = OpenStore(path, "node-b");
  CHECK(store->host() == Gid::Host(1));
  Result<pb::Entity> host = store->Lookup(Gid::Host(1));
  REQUIRE(host.ok());
  CHECK(host->name() == "node-b");
  std::vector<pb::ChangeEvent> changes = Changes(*store, 0);
  REQUIRE(changes.size() == 2);
  CHECK(changes[1].op() == pb::CHANGE_OP_UPDATED);
  CHECK(store->head_seq() == 2);

  // The same name again changes nothing.
  store.reset();
  store = OpenStore(path, "node-b");
  CHECK(store->head_seq() == 2);
}

TEST_CASE("a new store takes the host id it is given and keeps it on later opens", "[store]") {
  TempDir dir;
  std::string path = dir.File("directory.db");
  StoreOptions options{path, "node-c"};
  options.host_id = 3;
  {
    auto store = Store::Open(options);
    REQUIRE(store.status().message() == "");
    CHECK((*store)->host() == Gid::Host(3));
    Result<pb::Entity> host = (*store)->Lookup(Gid::Host(3));
    REQUIRE(host.ok());
    CHECK(host->name() == "node-c");
    CHECK((*store)->Lookup(Gid::Host(1)).status().code() == StatusCode::kNotFound);
  }
  // Without an id the recorded one is kept; with the same id too.
  CHECK(OpenStore(path, "node-c")->host() == Gid::Host(3));
  auto again = Store::Open(options);
  REQUIRE(again.ok());
  CHECK((*again)->host() == Gid::Host(3));
}

TEST_CASE("a store that recorded another host id refuses to open and names both ids", "[store]") {
  TempDir dir;
  std::string path = dir.File("directory.db");
  OpenStore(path).reset();  // records h1
  StoreOptions options{path, "node-a"};
  options.host_id = 2;
  Status status = Store::Open(options).status();
  CHECK(status.code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(status.message(),
             Catch::Contains("belongs to host id 1, not 2") && Catch::Contains("--host-id 1"));
  // Nothing was renumbered.
  CHECK(OpenStore(path)->host() == Gid::Host(1));

  options.host_id = 65536;
  CHECK(Store::Open(options).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("host attributes are set at every open and a change is logged as an update", "[store]") {
  TempDir dir;
  std::string path = dir.File("directory.db");
  StoreOptions options{path, "node-a"};
  options.host_attributes = {{"networks", "shm,tcp:eth0"}};
  auto Attribute = [](Store& store, const std::string& key) {
    Result<pb::Entity> host = store.Lookup(store.host());
    REQUIRE(host.ok());
    for (const pb::Attribute& attribute : host->attributes()) {
      if (attribute.key() == key) return attribute.value();
    }
    return std::string("<none>");
  };
  {
    auto store = std::move(Store::Open(options)).value();
    CHECK(Attribute(*store, "networks") == "shm,tcp:eth0");
    CHECK(store->head_seq() == 1);  // the host's "added" only
    Result<pb::QueryResponse> found = store->Query("kind=host and networks~*tcp:eth0*", 10, "");
    REQUIRE(found.ok());
    CHECK(found->entities_size() == 1);
  }
  {
    auto store = std::move(Store::Open(options)).value();
    CHECK(store->head_seq() == 1);  // the same value again changes nothing
  }
  options.host_attributes = {{"networks", "shm,tcp:eth0,tcp:eth1"}};
  auto store = std::move(Store::Open(options)).value();
  CHECK(Attribute(*store, "networks") == "shm,tcp:eth0,tcp:eth1");
  std::vector<pb::ChangeEvent> changes = Changes(*store, 0);
  REQUIRE(changes.size() == 2);
  CHECK(changes[1].op() == pb::CHANGE_OP_UPDATED);

  options.host_attributes = {{"bad key!", "x"}};
  CHECK(Store::Open(options).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("a store cannot be opened with an empty host name or in a missing directory", "[store]") {
  TempDir dir;
  RequireCode(Store::Open(StoreOptions{dir.File("directory.db"), ""}).status(),
              StatusCode::kInvalidArgument, "host name is empty");
  Status missing = Store::Open(StoreOptions{dir.File("no/such/dir/directory.db"), "n"}).status();
  CHECK_FALSE(missing.ok());
  CHECK(missing.code() == StatusCode::kFailedPrecondition);
}

TEST_CASE("processes are numbered in order and an index is never reused after reopening",
          "[store]") {
  TempDir dir;
  std::string path = dir.File("directory.db");
  auto store = OpenStore(path);
  Enrollment first = Enroll(*store, "a", 100);
  Enrollment second = Enroll(*store, "b", 101);
  CHECK(first.gid == Gid::Process(1, 1));
  CHECK(second.gid == Gid::Process(1, 2));
  CHECK(first.gid.ToString() == "h1.p1");
  CHECK(second.gid.ToString() == "h1.p2");
  CHECK_FALSE(first.resumed());
  CHECK(first.session_token.size() == 16);
  CHECK(first.session_token != second.session_token);

  // Exiting does not free the index either.
  REQUIRE(store->MarkProcessExited(second.gid, "done").ok());
  store.reset();
  store = OpenStore(path);
  Enrollment third = Enroll(*store, "c", 102);
  CHECK(third.gid == Gid::Process(1, 3));
  store.reset();
  store = OpenStore(path);
  CHECK(Enroll(*store, "d", 103).gid == Gid::Process(1, 4));

  Result<pb::Entity> kept = store->Lookup(first.gid);
  REQUIRE(kept.ok());
  CHECK(kept->name() == "a");
  CHECK(kept->os_pid() == 100);
}

TEST_CASE("enrolling checks the name, attributes and pid", "[store]") {
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"));
  pb::EnrollRegister request;
  request.set_name("worker");
  request.set_os_pid(0);
  RequireCode(store->EnrollProcess(request).status(), StatusCode::kInvalidArgument, "os_pid 0");
  request.set_os_pid(-5);
  RequireCode(store->EnrollProcess(request).status(), StatusCode::kInvalidArgument, "os_pid -5");
  request.set_os_pid(7);
  request.set_name("");
  RequireCode(store->EnrollProcess(request).status(), StatusCode::kInvalidArgument,
              "process name is empty");
  request.set_name("worker");
  pb::Attribute* attribute = request.add_attributes();
  attribute->set_key("pid");
  attribute->set_value("7");
  RequireCode(store->EnrollProcess(request).status(), StatusCode::kInvalidArgument, "reserved");
  CHECK(store->head_seq() == 1);  // nothing was written

  attribute->set_key("role");
  Result<Enrollment> ok = store->EnrollProcess(request);
  REQUIRE(ok.ok());
  CHECK(ok->gid == Gid::Process(1, 1));  // the refused ones used no index
}

TEST_CASE("lookup returns a process's name, pid, attributes and endpoints", "[store]") {
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"));
  pb::EnrollRegister request;
  request.set_name("solver");
  request.set_os_pid(31337);
  for (auto [key, value] : {std::pair{"zeta", "last"}, std::pair{"alpha", "first"}}) {
    pb::Attribute* attribute = request.add_attributes();
    attribute->set_key(key);
    attribute->set_value(value);
  }
  Result<Enrollment> process = store->EnrollProcess(request);
  REQUIRE(process.ok());

  pb::PublishEndpointRequest publish;
  publish.set_process(process->gid.raw());
  publish.set_session_token(process->session_token);
  publish.mutable_endpoint()->set_subsystem("tcp");
  publish.mutable_endpoint()->set_address(std::string("10.0.0.1:7\0x", 12));
  Result<uint64_t> seq = store->PublishEndpoint(publish);
  REQUIRE(seq.ok());
  CHECK(*seq == store->head_seq());
  publish.mutable_endpoint()->set_subsystem("shm");
  publish.mutable_endpoint()->set_address("/tocl-shm-1");
  REQUIRE(store->PublishEndpoint(publish).ok());
  publish.mutable_endpoint()->set_subsystem("tcp");  // replaces the first tcp address
  publish.mutable_endpoint()->set_address("10.0.0.2:8");
  REQUIRE(store->PublishEndpoint(publish).ok());

  Result<pb::Entity> entity = store->Lookup(process->gid);
  REQUIRE(entity.ok());
  CHECK(entity->gid() == process->gid.raw());
  CHECK(entity->kind() == pb::PROCESS);
  CHECK(entity->name() == "solver");
  CHECK(entity->os_pid() == 31337);
  CHECK(entity->state() == pb::RUNNING);
  CHECK(entity->exited_at_us() == 0);
  REQUIRE(entity->attributes_size() == 2);
  CHECK(entity->attributes(0).key() == "alpha");
  CHECK(entity->attributes(0).value() == "first");
  CHECK(entity->attributes(1).key() == "zeta");
  REQUIRE(entity->endpoints_size() == 2);
  CHECK(entity->endpoints(0).subsystem() == "shm");
  CHECK(entity->endpoints(0).address() == "/tocl-shm-1");
  CHECK(entity->endpoints(1).subsystem() == "tcp");
  CHECK(entity->endpoints(1).address() == "10.0.0.2:8");
}

TEST_CASE("publishing an endpoint checks the subsystem name and the token", "[store]") {
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"));
  Enrollment process = Enroll(*store);
  pb::PublishEndpointRequest publish;
  publish.set_process(process.gid.raw());
  publish.set_session_token(process.session_token);
  publish.mutable_endpoint()->set_subsystem("TCP");
  RequireCode(store->PublishEndpoint(publish).status(), StatusCode::kInvalidArgument, "'TCP'");
  publish.mutable_endpoint()->set_subsystem("tcp");
  publish.mutable_endpoint()->set_address(std::string(1025, 'a'));
  RequireCode(store->PublishEndpoint(publish).status(), StatusCode::kInvalidArgument, "1025 bytes");
  publish.mutable_endpoint()->set_address(std::string(1024, 'a'));
  publish.set_session_token("not the token");
  RequireCode(store->PublishEndpoint(publish).status(), StatusCode::kPermissionDenied);
  publish.set_session_token(process.session_token);
  CHECK(store->PublishEndpoint(publish).ok());
}

TEST_CASE("a registered thread is found with its name and attributes", "[store]") {
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"));
  Enrollment process = Enroll(*store);
  pb::RegisterThreadsRequest request = ThreadsRequest(process, {1, 2});
  AddAttribute(request.mutable_threads(0), "role", "merger");
  AddAttribute(request.mutable_threads(0), "rank", "3");
  uint64_t seq = RegisterOk(*store, request);
  CHECK(seq == store->head_seq());
  CHECK(seq == 4);  // host, process, two threads

  Result<pb::Entity> thread = store->Lookup(ThreadOf(process, 1));
  REQUIRE(thread.ok());
  CHECK(thread->gid() == ThreadOf(process, 1).raw());
  CHECK(thread->kind() == pb::THREAD);
  CHECK(thread->name() == "thread-1");
  CHECK(thread->state() == pb::RUNNING);
  CHECK(thread->started_at_us() > 0);
  CHECK(thread->exited_at_us() == 0);
  CHECK(thread->endpoints_size() == 0);
  REQUIRE(thread->attributes_size() == 2);
  CHECK(thread->attributes(0).key() == "rank");
  CHECK(thread->attributes(0).value() == "3");
  CHECK(thread->attributes(1).key() == "role");
  CHECK(thread->attributes(1).value() == "merger");

  Result<pb::Entity> other = store->Lookup(ThreadOf(process, 2));
  REQUIRE(other.ok());
  CHECK(other->attributes_size() == 0);
}

TEST_CASE("lookup of an unknown id is not found and of a malformed id is invalid", "[store]") {
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"));
  Enrollment process = Enroll(*store);
  RequireCode(store->Lookup(Gid::Process(1, 99)).status(), StatusCode::kNotFound, "h1.p99");
  RequireCode(store->Lookup(ThreadOf(process, 9)).status(), StatusCode::kNotFound, "h1.p1.t9");
  RequireCode(store->Lookup(Gid::Process(2, 1)).status(), StatusCode::kNotFound, "h2");
  RequireCode(store->Lookup(Gid()).status(), StatusCode::kInvalidArgument);
  RequireCode(store->Lookup(Gid::FromRaw((uint64_t{1} << 48) | 5)).status(),
              StatusCode::kInvalidArgument);
}

TEST_CASE("registering threads with a wrong session token is permission denied", "[store]") {
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"));
  Enrollment mine = Enroll(*store, "mine");
  Enrollment theirs = Enroll(*store, "theirs");
  uint64_t head = store->head_seq();

  pb::RegisterThreadsRequest request = ThreadsRequest(mine, {1});
  request.set_session_token(theirs.session_token);  // a real token, of another process
  RequireCode(store->RegisterThreads(request).status(), StatusCode::kPermissionDenied, "h1.p1");
  request.set_session_token("");
  RequireCode(store->RegisterThreads(request).status(), StatusCode::kPermissionDenied);
  request.set_session_token(mine.session_token.substr(0, 15));
  RequireCode(store->RegisterThreads(request).status(), StatusCode::kPermissionDenied);
  request.set_session_token(mine.session_token + "x");
  RequireCode(store->RegisterThreads(request).status(), StatusCode::kPermissionDenied);
  CHECK_FALSE(Exists(*store, ThreadOf(mine, 1)));
  CHECK(store->head_seq() == head);
}

TEST_CASE("registering a thread of another process is permission denied", "[store]") {
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"));
  Enrollment mine = Enroll(*store, "mine");
  Enrollment theirs = Enroll(*store, "theirs");
  pb::RegisterThreadsRequest request = ThreadsRequest(mine, {1});
  request.add_threads()->set_gid(ThreadOf(theirs, 1).raw());
  request.mutable_threads(1)->set_name("intruder");
  RequireCode(store->RegisterThreads(request).status(), StatusCode::kPermissionDenied, "h1.p2.t1");
  CHECK_FALSE(Exists(*store, ThreadOf(mine, 1)));
  CHECK_FALSE(Exists(*store, ThreadOf(theirs, 1)));
}

TEST_CASE("registering threads for an unknown or exited process fails", "[store]") {
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"));
  Enrollment process = Enroll(*store);
  pb::RegisterThreadsRequest request = ThreadsRequest(process, {1});

  pb::RegisterThreadsRequest unknown = request;
  unknown.set_process(Gid::Process(1, 9).raw());
  unknown.mutable_threads(0)->set_gid(Gid::Thread(1, 9, 1).raw());
  RequireCode(store->RegisterThreads(unknown).status(), StatusCode::kNotFound, "h1.p9");

  REQUIRE(store->MarkProcessExited(process.gid, "crashed").ok());
  RequireCode(store->RegisterThreads(request).status(), StatusCode::kFailedPrecondition, "crashed");
}

TEST_CASE("a thread listed twice in one batch is invalid and nothing is stored", "[store]") {
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"));
  Enrollment process = Enroll(*store);
  RequireCode(store->RegisterThreads(ThreadsRequest(process, {1, 2, 1})).status(),
              StatusCode::kInvalidArgument, "h1.p1.t1 appears twice");
  CHECK_FALSE(Exists(*store, ThreadOf(process, 1)));
  CHECK_FALSE(Exists(*store, ThreadOf(process, 2)));
}

TEST_CASE("ids that are not threads of the request's process are invalid", "[store]") {
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"));
  Enrollment process = Enroll(*store);

  pb::RegisterThreadsRequest request = ThreadsRequest(process, {1});
  request.mutable_threads(0)->set_gid(process.gid.raw());  // a process id as a thread
  RequireCode(store->RegisterThreads(request).status(), StatusCode::kInvalidArgument,
              "is not a thread id");

  request = ThreadsRequest(process, {1});
  request.set_process(ThreadOf(process, 1).raw());  // a thread id as the process
  RequireCode(store->RegisterThreads(request).status(), StatusCode::kInvalidArgument,
              "is not a process id");

  request = ThreadsRequest(process, {1});
  request.mutable_threads(0)->set_name("");
  RequireCode(store->RegisterThreads(request).status(), StatusCode::kInvalidArgument,
              "h1.p1.t1: thread name is empty");
  request.mutable_threads(0)->set_name("bad\nname");
  RequireCode(store->RegisterThreads(request).status(), StatusCode::kInvalidArgument,
              "control character");
}

TEST_CASE("re-registering a thread fails and stores nothing of the failing batch", "[store]") {
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"));
  Enrollment process = Enroll(*store);
  RegisterOk(*store, ThreadsRequest(process, {3}));
  uint64_t head = store->head_seq();

  // Threads 1 and 2 are inserted before the third fails: all must be undone.
  pb::RegisterThreadsRequest batch = ThreadsRequest(process, {1, 2, 3});
  AddAttribute(batch.mutable_threads(0), "role", "early");
  RequireCode(store->RegisterThreads(batch).status(), StatusCode::kAlreadyExists,
              "h1.p1.t3 is already registered");
  CHECK_FALSE(Exists(*store, ThreadOf(process, 1)));
  CHECK_FALSE(Exists(*store, ThreadOf(process, 2)));
  CHECK(store->head_seq() == head);
  CHECK(Changes(*store, head).empty());
  Result<pb::Entity> three = store->Lookup(ThreadOf(process, 3));
  REQUIRE(three.ok());
  CHECK(three->name() == "thread-3");

  // The undone threads can be registered afterwards, with no stray attributes.
  uint64_t seq = RegisterOk(*store, ThreadsRequest(process, {1, 2}));
  CHECK(seq == head + 2);
  Result<pb::Entity> one = store->Lookup(ThreadOf(process, 1));
  REQUIRE(one.ok());
  CHECK(one->attributes_size() == 0);
  std::vector<pb::ChangeEvent> changes = Changes(*store, head);
  REQUIRE(changes.size() == 2);
  CHECK(changes[0].seq() == head + 1);
  CHECK(changes[0].gid() == ThreadOf(process, 1).raw());
  CHECK(changes[1].seq() == head + 2);
}

TEST_CASE("an empty batch changes nothing and acknowledges no unwritten change", "[store]") {
  // RegisterThreads and UnregisterThreads return sqlite3_last_insert_rowid()
  // of the writer connection as "the seq of the last change they made".
  // With no threads there is no change, and that value is whatever the
  // connection inserted last: here the seq of a change that was rolled back,
  // larger than head_seq(), which a client would then wait for.
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"));
  Enrollment process = Enroll(*store);
  RegisterOk(*store, ThreadsRequest(process, {3}));
  REQUIRE(store->RegisterThreads(ThreadsRequest(process, {1, 2, 3})).status().code() ==
          StatusCode::kAlreadyExists);
  const uint64_t head = store->head_seq();

  Result<uint64_t> registered = store->RegisterThreads(ThreadsRequest(process, {}));
  REQUIRE(registered.ok());
  CHECK(*registered <= head);
  pb::UnregisterThreadsRequest unregister;
  unregister.set_process(process.gid.raw());
  unregister.set_session_token(process.session_token);
  Result<uint64_t> unregistered = store->UnregisterThreads(unregister);
  REQUIRE(unregistered.ok());
  CHECK(*unregistered <= head);
  CHECK(store->head_seq() == head);
}

TEST_CASE("64 attributes on a thread are accepted and 65 are invalid", "[store]") {
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"));
  Enrollment process = Enroll(*store);
  pb::RegisterThreadsRequest request = ThreadsRequest(process, {1, 2});
  for (size_t i = 0; i < kMaxAttributesPerEntity; ++i) {
    AddAttribute(request.mutable_threads(0), "key" + std::to_string(i), "v");
    AddAttribute(request.mutable_threads(1), "key" + std::to_string(i), "v");
  }
  AddAttribute(request.mutable_threads(1), "one_more", "v");
  RequireCode(store->RegisterThreads(request).status(), StatusCode::kInvalidArgument,
              "65 attributes (at most 64 per entity)");
  CHECK_FALSE(Exists(*store, ThreadOf(process, 1)));

  request.mutable_threads(1)->mutable_attributes()->RemoveLast();
  RegisterOk(*store, request);
  Result<pb::Entity> thread = store->Lookup(ThreadOf(process, 2));
  REQUIRE(thread.ok());
  CHECK(thread->attributes_size() == 64);
}

TEST_CASE("bad attribute keys and values are invalid and name the thread", "[store]") {
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"));
  Enrollment process = Enroll(*store);
  struct Case {
    std::string key, value, mentions;
  };
  for (const Case& c : {
           Case{"", "v", "attribute key is empty"},
           Case{"1x", "v", "'1x' must match"},
           Case{"a b", "v", "'a b' must match"},
           Case{"kind", "v", "'kind' is reserved"},
           Case{"gid", "v", "'gid' is reserved"},
           Case{std::string(257, 'k'), "v", "257 bytes long"},
           Case{"big", std::string(4097, 'v'), "4097 bytes long"},
       }) {
    pb::RegisterThreadsRequest request = ThreadsRequest(process, {1, 2});
    AddAttribute(request.mutable_threads(1), c.key, c.value);
    INFO("key '" << c.key.substr(0, 20) << "'");
    Status status = store->RegisterThreads(request).status();
    RequireCode(status, StatusCode::kInvalidArgument, "h1.p1.t2: ");
    CHECK_THAT(status.message(), Catch::Contains(c.mentions));
  }
  pb::RegisterThreadsRequest twice = ThreadsRequest(process, {1});
  AddAttribute(twice.mutable_threads(0), "role", "a");
  AddAttribute(twice.mutable_threads(0), "role", "b");
  RequireCode(store->RegisterThreads(twice).status(), StatusCode::kInvalidArgument,
              "'role' appears twice");
  CHECK_FALSE(Exists(*store, ThreadOf(process, 1)));
  CHECK_FALSE(Exists(*store, ThreadOf(process, 2)));
}

TEST_CASE("unregistering threads marks them exited, all or nothing", "[store]") {
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"));
  Enrollment process = Enroll(*store);
  RegisterOk(*store, ThreadsRequest(process, {1, 2}));
  uint64_t head = store->head_seq();

  pb::UnregisterThreadsRequest request;
  request.set_process(process.gid.raw());
  request.set_session_token(process.session_token);
  request.add_threads(ThreadOf(process, 1).raw());
  request.add_threads(ThreadOf(process, 7).raw());  // never registered
  RequireCode(store->UnregisterThreads(request).status(), StatusCode::kNotFound, "h1.p1.t7");
  Result<pb::Entity> one = store->Lookup(ThreadOf(process, 1));
  REQUIRE(one.ok());
  CHECK(one->state() == pb::RUNNING);
  CHECK(store->head_seq() == head);

  request.mutable_threads()->RemoveLast();
  Result<uint64_t> seq = store->UnregisterThreads(request);
  REQUIRE(seq.ok());
  CHECK(*seq == head + 1);
  one = store->Lookup(ThreadOf(process, 1));
  REQUIRE(one.ok());
  CHECK(one->state() == pb::EXITED);
  CHECK(one->exit_reason() == "unregistered");
  CHECK(one->exited_at_us() >= one->started_at_us());
  std::vector<pb::ChangeEvent> changes = Changes(*store, head);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].op() == pb::CHANGE_OP_EXITED);

  // An exited thread cannot be unregistered again.
  RequireCode(store->UnregisterThreads(request).status(), StatusCode::kNotFound, "h1.p1.t1");
}

TEST_CASE("marking a process exited marks its running threads and logs each in order", "[store]") {
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"));
  Enrollment process = Enroll(*store, "doomed");
  Enrollment bystander = Enroll(*store, "bystander");
  RegisterOk(*store, ThreadsRequest(process, {1, 2, 3}));
  RegisterOk(*store, ThreadsRequest(bystander, {1}));
  pb::UnregisterThreadsRequest unregister;
  unregister.set_process(process.gid.raw());
  unregister.set_session_token(process.session_token);
  unregister.add_threads(ThreadOf(process, 2).raw());
  unregister.set_reason("finished early");
  REQUIRE(store->UnregisterThreads(unregister).ok());
  uint64_t head = store->head_seq();

  REQUIRE(store->MarkProcessExited(process.gid, "crashed").ok());
  std::vector<pb::ChangeEvent> changes = Changes(*store, head);
  REQUIRE(changes.size() == 3);  // threads 1 and 3, then the process
  std::set<uint64_t> thread_gids;
  for (size_t i = 0; i < changes.size(); ++i) {
    CHECK(changes[i].seq() == head + 1 + i);
    CHECK(changes[i].op() == pb::CHANGE_OP_EXITED);
    CHECK(changes[i].entity().gid() == changes[i].gid());
    CHECK(changes[i].entity().state() == pb::EXITED);
    CHECK(changes[i].entity().exit_reason() == "crashed");
    CHECK(changes[i].at_us() > 0);
    if (i < 2) thread_gids.insert(changes[i].gid());
  }
  CHECK(thread_gids == std::set<uint64_t>{ThreadOf(process, 1).raw(), ThreadOf(process, 3).raw()});
  CHECK(changes[2].gid() == process.gid.raw());
  CHECK(changes[2].entity().kind() == pb::PROCESS);
  CHECK(store->head_seq() == changes.back().seq());

  Result<pb::Entity> two = store->Lookup(ThreadOf(process, 2));
  REQUIRE(two.ok());
  CHECK(two->exit_reason() == "finished early");  // already exited: left alone
  Result<pb::Entity> other = store->Lookup(ThreadOf(bystander, 1));
  REQUIRE(other.ok());
  CHECK(other->state() == pb::RUNNING);

  // Marking again, or marking an unknown process, changes nothing.
  head = store->head_seq();
  CHECK(store->MarkProcessExited(process.gid, "again").ok());
  CHECK(store->MarkProcessExited(Gid::Process(1, 99), "unknown").ok());
  CHECK(store->head_seq() == head);
  Result<pb::Entity> entity = store->Lookup(process.gid);
  REQUIRE(entity.ok());
  CHECK(entity->exit_reason() == "crashed");
}

TEST_CASE("changes come back oldest first from a given seq, at most max of them", "[store]") {
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"));
  Enrollment process = Enroll(*store);
  RegisterOk(*store, ThreadsRequest(process, {1, 2}));
  pb::PublishEndpointRequest publish;
  publish.set_process(process.gid.raw());
  publish.set_session_token(process.session_token);
  publish.mutable_endpoint()->set_subsystem("shm");
  REQUIRE(store->PublishEndpoint(publish).ok());

  std::vector<pb::ChangeEvent> all = Changes(*store, 0);
  REQUIRE(all.size() == 5);
  const std::vector<std::pair<Gid, pb::ChangeOp>> expected = {
      {Gid::Host(1), pb::CHANGE_OP_ADDED},         {process.gid, pb::CHANGE_OP_ADDED},
      {ThreadOf(process, 1), pb::CHANGE_OP_ADDED}, {ThreadOf(process, 2), pb::CHANGE_OP_ADDED},
      {process.gid, pb::CHANGE_OP_UPDATED},
  };
  for (size_t i = 0; i < all.size(); ++i) {
    INFO("event " << i);
    CHECK(all[i].seq() == i + 1);
    CHECK(Gid::FromRaw(all[i].gid()) == expected[i].first);
    CHECK(all[i].op() == expected[i].second);
    CHECK(all[i].entity().gid() == all[i].gid());
  }
  // The snapshot is the entity now: the process's added event shows the endpoint.
  CHECK(all[1].entity().endpoints_size() == 1);

  std::vector<pb::ChangeEvent> first_two = Changes(*store, 0, 2);
  REQUIRE(first_two.size() == 2);
  CHECK(first_two[1].seq() == 2);
  std::vector<pb::ChangeEvent> tail = Changes(*store, 3, 10);
  REQUIRE(tail.size() == 2);
  CHECK(tail[0].seq() == 4);
  CHECK(Changes(*store, 5).empty());
  CHECK(Changes(*store, UINT64_MAX).empty());
  CHECK(Changes(*store, 0, 0).empty());
}

TEST_CASE("head_seq advances with every write and survives reopening", "[store]") {
  TempDir dir;
  std::string path = dir.File("directory.db");
  auto store = OpenStore(path);
  uint64_t before = store->head_seq();
  Enrollment process = Enroll(*store);
  CHECK(store->head_seq() == before + 1);
  uint64_t seq = RegisterOk(*store, ThreadsRequest(process, {1, 2, 3}));
  CHECK(seq == before + 4);
  CHECK(store->head_seq() == seq);
  REQUIRE(store->MarkProcessExited(process.gid, "bye").ok());
  CHECK(store->head_seq() == seq + 4);
  uint64_t head = store->head_seq();
  store.reset();
  store = OpenStore(path);
  CHECK(store->head_seq() == head);
}

TEST_CASE("WaitForChange wakes when another thread writes", "[store]") {
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"));
  uint64_t seq = store->head_seq();
  auto deadline = std::chrono::steady_clock::now() + 60s;
  std::future<Result<Enrollment>> writer = std::async(std::launch::async, [&] {
    pb::EnrollRegister request;
    request.set_name("late");
    request.set_os_pid(77);
    return store->EnrollProcess(request);
  });
  uint64_t head = store->WaitForChange(seq, deadline);
  auto woke = std::chrono::steady_clock::now();
  REQUIRE(writer.get().ok());
  CHECK(head == seq + 1);
  CHECK(woke < deadline);
}

TEST_CASE("WaitForChange returns at once when the head is already past seq", "[store]") {
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"));
  Enroll(*store);
  uint64_t head = store->head_seq();
  auto deadline = std::chrono::steady_clock::now() + 60s;
  CHECK(store->WaitForChange(head - 1, deadline) == head);
  CHECK(std::chrono::steady_clock::now() < deadline);
}

TEST_CASE("WaitForChange gives up at the deadline when nothing changes", "[store]") {
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"));
  uint64_t head = store->head_seq();
  auto deadline = std::chrono::steady_clock::now() + 20ms;
  CHECK(store->WaitForChange(head, deadline) == head);
  CHECK(std::chrono::steady_clock::now() >= deadline);
}

TEST_CASE("WakeWatchers wakes a waiter with nothing new", "[store]") {
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"));
  uint64_t head = store->head_seq();
  auto deadline = std::chrono::steady_clock::now() + 60s;
  std::future<uint64_t> waited =
      std::async(std::launch::async, [&] { return store->WaitForChange(head, deadline); });
  // The waiter may not be waiting yet when a wake is sent: wake until it returns.
  while (waited.wait_for(5ms) != std::future_status::ready) store->WakeWatchers();
  CHECK(waited.get() == head);
  CHECK(std::chrono::steady_clock::now() < deadline);
}

TEST_CASE("a query pages through 250 threads in gid order", "[store]") {
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"));
  Enrollment process = Enroll(*store);
  Enrollment other = Enroll(*store, "other");
  std::vector<uint32_t> indexes;
  for (uint32_t i = 1; i <= 250; ++i) indexes.push_back(i);
  RegisterOk(*store, ThreadsRequest(process, indexes));

  SECTION("with pages of 100 the last page has 50 and no next token") {
    std::vector<uint64_t> seen;
    std::string token;
    std::vector<int> page_sizes;
    for (int page = 0; page < 10; ++page) {
      Result<pb::QueryResponse> response = store->Query("kind=thread", 100, token);
      REQUIRE(response.status().message() == "");
      page_sizes.push_back(response->entities_size());
      for (const pb::Entity& entity : response->entities()) {
        CHECK(entity.kind() == pb::THREAD);
        seen.push_back(entity.gid());
      }
      token = response->next_page_token();
      if (token.empty()) break;
    }
    CHECK(page_sizes == std::vector<int>{100, 100, 50});
    REQUIRE(seen.size() == 250);
    for (size_t i = 0; i < seen.size(); ++i) {
      CHECK(seen[i] == ThreadOf(process, static_cast<uint32_t>(i + 1)).raw());
    }
  }

  SECTION("a last page that ends exactly at the limit has no next token") {
    std::string token;
    int pages = 0;
    size_t total = 0;
    for (; pages < 10; ++pages) {
      Result<pb::QueryResponse> response = store->Query("kind=thread", 50, token);
      REQUIRE(response.ok());
      total += static_cast<size_t>(response->entities_size());
      token = response->next_page_token();
      if (token.empty()) break;
    }
    CHECK(pages + 1 == 5);
    CHECK(total == 250);
  }

  SECTION("a limit of 0 means 100") {
    Result<pb::QueryResponse> response = store->Query("kind=thread", 0, "");
    REQUIRE(response.ok());
    CHECK(response->entities_size() == 100);
    CHECK_FALSE(response->next_page_token().empty());
  }

  SECTION("a query for processes and the host finds them") {
    Result<pb::QueryResponse> processes = store->Query("kind=process", 100, "");
    REQUIRE(processes.ok());
    REQUIRE(processes->entities_size() == 2);
    CHECK(processes->entities(0).gid() == process.gid.raw());
    CHECK(processes->entities(1).gid() == other.gid.raw());
    CHECK(processes->next_page_token().empty());
  }
}

TEST_CASE("a query page ends at 2 MiB of entities and the token goes on from there", "[store]") {
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"));
  Enrollment process = Enroll(*store);
  // 100 threads with 64 attributes of 1 KiB: about 6.5 MiB in all.
  pb::RegisterThreadsRequest request;
  request.set_process(process.gid.raw());
  request.set_session_token(process.session_token);
  for (uint32_t i = 1; i <= 100; ++i) {
    pb::ThreadRegistration* thread = request.add_threads();
    thread->set_gid(ThreadOf(process, i).raw());
    thread->set_name("fat");
    for (int k = 0; k < 64; ++k) {
      pb::Attribute* attribute = thread->add_attributes();
      attribute->set_key("k" + std::to_string(k));
      attribute->set_value(std::string(1024, 'v'));
    }
  }
  REQUIRE(store->RegisterThreads(request).ok());

  std::vector<uint64_t> seen;
  std::string token;
  int pages = 0;
  do {
    Result<pb::QueryResponse> page = store->Query("kind=thread", 100, token);
    REQUIRE(page.ok());
    CHECK(page->ByteSizeLong() <= (2u << 20) + (80u << 10));  // at most one entity over
    CHECK(page->entities_size() > 0);
    for (const pb::Entity& entity : page->entities()) seen.push_back(entity.gid());
    token = page->next_page_token();
    ++pages;
  } while (!token.empty() && pages < 20);
  CHECK(pages >= 4);
  REQUIRE(seen.size() == 100);
  for (size_t i = 0; i < seen.size(); ++i) {
    CHECK(seen[i] == ThreadOf(process, static_cast<uint32_t>(i + 1)).raw());
  }
}

TEST_CASE("a malformed page token or query is invalid", "[store]") {
  TempDir dir;
  auto store = OpenStore(dir.File("directory.db"));
  for (std::string_view token :
       {"abc", "12x", " 5", "5 ", "+5", "0x10", "1.5", "99999999999999999999999"}) {
    INFO("token '" << token << "'");
    RequireCode(store->Query("kind=thread", 10, token).status(), StatusCode::kInvalidArgument,
                "page token");
  }
  CHECK(store->Query("kind=thread", 10, "-5").ok());  // any stored gid is a valid position
  CHECK_FALSE(store->Query("kind=", 10, "").ok());
  CHECK(store->Query("kind=", 10, "").status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("a process resumes with its token and not with another", "[store]") {
  TempDir dir;
  std::string path = dir.File("directory.db");
  auto store = OpenStore(path);
  Enrollment process = Enroll(*store);
  Enrollment gone = Enroll(*store, "gone");
  REQUIRE(store->MarkProcessExited(gone.gid, "exited").ok());
  store.reset();
  store = OpenStore(path);

  RequireCode(store->ResumeProcess(process.gid, "wrong").status(), StatusCode::kPermissionDenied,
              "h1.p1");
  RequireCode(store->ResumeProcess(process.gid, gone.session_token).status(),
              StatusCode::kPermissionDenied);
  RequireCode(store->ResumeProcess(Gid::Process(1, 9), process.session_token).status(),
              StatusCode::kNotFound);
  RequireCode(store->ResumeProcess(ThreadOf(process, 1), process.session_token).status(),
              StatusCode::kInvalidArgument, "not a process id");
  RequireCode(store->ResumeProcess(Gid::Process(2, 1), process.session_token).status(),
              StatusCode::kInvalidArgument, "does not belong to this host");
  RequireCode(store->ResumeProcess(gone.gid, gone.session_token).status(),
              StatusCode::kFailedPrecondition, "exited");

  Result<Enrollment> resumed = store->ResumeProcess(process.gid, process.session_token);
  REQUIRE(resumed.ok());
  CHECK(resumed->gid == process.gid);
  CHECK(resumed->session_token == process.session_token);
  CHECK(resumed->resumed());
  // The resumed session keeps working.
  RegisterOk(*store, ThreadsRequest(*resumed, {1}));
}

TEST_CASE("expiring orphans skips the processes that resumed", "[store]") {
  TempDir dir;
  std::string path = dir.File("directory.db");
  auto store = OpenStore(path);
  Enrollment a = Enroll(*store, "a", 11);
  Enrollment b = Enroll(*store, "b", 12);
  Enrollment c = Enroll(*store, "c", 13);
  RegisterOk(*store, ThreadsRequest(a, {1}));
  store.reset();
  store = OpenStore(path);

  Result<std::vector<std::pair<Gid, int64_t>>> running = store->RunningProcesses();
  REQUIRE(running.ok());
  CHECK(running->size() == 3);
  std::vector<Gid> orphans;
  for (const auto& [gid, pid] : *running) orphans.push_back(gid);

  REQUIRE(store->ResumeProcess(b.gid, b.session_token).ok());
  Result<size_t> expired = store->ExpireUnresumed(orphans, "daemon restarted");
  REQUIRE(expired.ok());
  CHECK(*expired == 2);

  for (const auto& [gid, state] :
       {std::pair{a.gid, pb::EXITED}, std::pair{b.gid, pb::RUNNING}, std::pair{c.gid, pb::EXITED},
        std::pair{ThreadOf(a, 1), pb::EXITED}}) {
    Result<pb::Entity> entity = store->Lookup(gid);
    REQUIRE(entity.ok());
    INFO(gid.ToString());
    CHECK(entity->state() == state);
    if (state == pb::EXITED) {
      CHECK(entity->exit_reason() == "daemon restarted");
    }
  }
  running = store->RunningProcesses();
  REQUIRE(running.ok());
  REQUIRE(running->size() == 1);
  CHECK(running->at(0).first == b.gid);
  CHECK(running->at(0).second == 12);

  // An expired process cannot resume afterwards.
  RequireCode(store->ResumeProcess(a.gid, a.session_token).status(),
              StatusCode::kFailedPrecondition);
}

TEST_CASE("a database from a newer schema is refused", "[store]") {
  TempDir dir;
  std::string path = dir.File("directory.db");
  {
    Result<Database> db = Database::Open(path, OpenMode::kReadWrite);
    REQUIRE(db.ok());
    REQUIRE(db->Exec("CREATE TABLE schema_version(version INTEGER NOT NULL); "
                     "INSERT INTO schema_version VALUES (" +
                     std::to_string(LatestSchemaVersion() + 1) + ")")
                .ok());
  }
  Result<std::unique_ptr<Store>> store = Store::Open(StoreOptions{path, "node-a"});
  RequireCode(store.status(), StatusCode::kFailedPrecondition,
              "schema version " + std::to_string(LatestSchemaVersion() + 1) + " is newer");
}

TEST_CASE("a database at the current schema opens and keeps its rows", "[store]") {
  TempDir dir;
  std::string path = dir.File("directory.db");
  OpenStore(path).reset();
  {
    Result<Database> db = Database::Open(path, OpenMode::kReadWrite);
    REQUIRE(db.ok());
    Result<int64_t> version = db->QueryInt("SELECT max(version) FROM schema_version");
    REQUIRE(version.ok());
    CHECK(*version == LatestSchemaVersion());
    Result<int64_t> rows = db->QueryInt("SELECT count(*) FROM schema_version");
    REQUIRE(rows.ok());
    CHECK(*rows == LatestSchemaVersion());
  }
  auto store = OpenStore(path);
  CHECK(store->head_seq() == 1);
}

TEST_CASE("a file that is not a database is data loss", "[store]") {
  TempDir dir;
  std::string path = dir.File("directory.db");
  {
    std::ofstream file(path, std::ios::binary);
    for (int i = 0; i < 512; ++i) file << "this is not an SQLite database, only text. ";
  }
  Result<std::unique_ptr<Store>> store = Store::Open(StoreOptions{path, "node-a"});
  RequireCode(store.status(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace tocl::directory
