// Clusters of real toclsd daemons on loopback (toclsd --seed / --join):
// host ids from the seed, replication of every host's rows to every other,
// catching up after a crash, life without the seed, down detection, and
// snapshots for replicas the change log no longer covers.
//
// Each daemon listens on 127.0.0.1:0 (its real address is read from
// <state_dir>/listen-address) with heartbeats every 0.2 s and members
// marked down after 1 s, so every test takes seconds.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "daemon_harness.h"
#include "database_file.h"
#include "raw_directory.h"
#include "tocl/directory/v1/cluster.grpc.pb.h"

namespace tocl::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kConverge = std::chrono::milliseconds(20'000);

// "OK", or the code and message: what a failed REQUIRE shows.
std::string Text(const grpc::Status& status) {
  return status.ok() ? "OK" : Describe(status);
}

// A loopback port kept for a test's whole life, so that a daemon restarts
// at the same address: bound (not listening) with SO_REUSEPORT, which gRPC
// also sets on its listeners, so the daemon can bind it too and nobody else
// can.
class HeldPort {
 public:
  HeldPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    int one = 1;
    REQUIRE(::setsockopt(fd_, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) == 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
    socklen_t length = sizeof(address);
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    address_ = "127.0.0.1:" + std::to_string(ntohs(address.sin_port));
  }
  ~HeldPort() { ::close(fd_); }
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;
  const std::string& address() const { return address_; }

 private:
  int fd_ = -1;
  std::string address_;
};

std::unique_ptr<Daemon> StartSeed(std::vector<std::string> extra_args = {},
                                  std::string listen = "127.0.0.1:0") {
  DaemonOptions options = LoopbackClusterMember("seed", std::move(extra_args));
  options.seed = true;
  options.listen = std::move(listen);
  auto daemon = std::make_unique<Daemon>(options);
  REQUIRE(daemon->Start().message() == "");
  return daemon;
}

std::unique_ptr<Daemon> StartJoiner(Daemon& seed, const std::string& name,
                                    std::vector<std::string> extra_args = {}) {
  Result<std::string> seed_address = seed.tcp_address();
  REQUIRE(seed_address.status().message() == "");
  DaemonOptions options = LoopbackClusterMember(name, std::move(extra_args));
  options.join = {*seed_address};
  auto daemon = std::make_unique<Daemon>(options);
  REQUIRE(daemon->Start().message() == "");
  return daemon;
}

// The host id a daemon runs as: what it tells a process that enrolls.
Gid HostIdOf(const Daemon& daemon) {
  auto stub = NewRawStub(daemon.address());
  EnrollAttempt attempt = RawEnroll(*stub, MakeRegister("probe"));
  REQUIRE(Text(attempt.status) == "OK");
  Gid host = Gid::FromRaw(attempt.enrollment->enrolled().host_gid());
  attempt.enrollment->Goodbye();
  return host;
}

// Registers threads first..first+count-1 of the process, in batches of 1000,
// each with role=rN (N = index % 4).
void RegisterThreads(pb::Directory::Stub& stub, const RawEnrollment& process, uint32_t first,
                     uint32_t count) {
  for (uint32_t start = first; start < first + count; start += 1000) {
    std::vector<pb::ThreadRegistration> threads;
    for (uint32_t i = start; i < std::min(first + count, start + 1000); ++i) {
      threads.push_back(MakeThread(Gid::Thread(process.gid(), i), "worker-" + std::to_string(i),
                                   {{"role", "r" + std::to_string(i % 4)}}));
    }
    grpc::Status status = RawRegisterThreads(stub, process.ThreadsRequest(std::move(threads)));
    REQUIRE(Text(status) == "OK");
  }
}

// Every entity matching `expression`, as "gid name state attributes", in
// the order the daemon pages them (pages of `limit`).
std::vector<std::string> QueryAll(const Daemon& daemon, const std::string& expression,
                                  uint32_t limit = 10'000) {
  auto stub = NewRawStub(daemon.address());
  std::vector<std::string> found;
  std::string token;
  do {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 10s);
    pb::QueryRequest request;
    request.set_expression(expression);
    request.set_limit(limit);
    request.set_page_token(token);
    pb::QueryResponse response;
    grpc::Status status = stub->Query(&context, request, &response);
    if (!status.ok()) return {"query failed: " + Describe(status)};
    for (const pb::Entity& entity : response.entities()) {
      std::string line = Gid::FromRaw(entity.gid()).ToString() + " " + entity.name() + " " +
                         pb::EntityState_Name(entity.state());
      for (const pb::Attribute& attribute : entity.attributes()) {
        line += " " + attribute.key() + "=" + attribute.value();
      }
      found.push_back(std::move(line));
    }
    token = response.next_page_token();
  } while (!token.empty());
  return found;
}

pb::EntityState StateOf(const Daemon& daemon, Gid gid) {
  auto stub = NewRawStub(daemon.address());
  pb::Entity entity;
  grpc::Status status = RawLookup(*stub, gid.raw(), &entity);
  return status.ok() ? entity.state() : pb::ENTITY_STATE_UNSPECIFIED;
}

// Waits until every daemon answers `expression` with `expected` entities.
bool AllSee(const std::vector<const Daemon*>& daemons, const std::string& expression,
            size_t expected) {
  return WaitUntil(
      [&] {
        for (const Daemon* daemon : daemons) {
          if (QueryAll(*daemon, expression).size() != expected) return false;
        }
        return true;
      },
      kConverge, 100ms);
}

TEST_CASE("daemons joining through the seed get h1, h2, h3 and keep them across restarts",
          "[integration][cluster]") {
  HeldPort seed_port;  // the joiners find the restarted seed where they joined it
  auto seed = StartSeed({}, seed_port.address());
  auto second = StartJoiner(*seed, "second");
  auto third = StartJoiner(*seed, "third");
  CHECK(HostIdOf(*seed) == Gid::Host(1));
  CHECK(HostIdOf(*second) == Gid::Host(2));
  CHECK(HostIdOf(*third) == Gid::Host(3));
  // Every daemon lists every host, with its cluster address.
  REQUIRE(AllSee({seed.get(), second.get(), third.get()}, "kind=host", 3));
  auto stub = NewRawStub(second->address());
  pb::Entity host;
  REQUIRE(Text(RawLookup(*stub, Gid::Host(3).raw(), &host)) == "OK");
  CHECK(host.name() == "third");
  CHECK(host.address() == third->tcp_address().value_or("?"));

  for (Daemon* daemon : {seed.get(), second.get(), third.get()}) {
    REQUIRE(daemon->Stop().value_or(-1) == 0);
  }
  // Restarted in another order (the joiners with new ports): the seed
  // gives each node key its id again.
  REQUIRE(seed->Start().message() == "");
  REQUIRE(third->Start().message() == "");
  REQUIRE(second->Start().message() == "");
  CHECK(HostIdOf(*seed) == Gid::Host(1));
  CHECK(HostIdOf(*second) == Gid::Host(2));
  CHECK(HostIdOf(*third) == Gid::Host(3));
  CHECK_THAT(third->LogTail(20'000), !Catch::Contains("no seed answered"));
  CHECK_THAT(seed->LogTail(20'000),
             Catch::Contains("'third' at " + third->tcp_address().value() + " joined as h3"));
  // Everyone learns the new addresses.
  REQUIRE(WaitUntil(
      [&] {
        pb::Entity entity;
        return RawLookup(*stub, Gid::Host(3).raw(), &entity).ok() &&
               entity.address() == third->tcp_address().value() && entity.state() == pb::RUNNING;
      },
      kConverge));
}

TEST_CASE("a daemon that asks for a host id another daemon holds is refused",
          "[integration][cluster]") {
  auto seed = StartSeed();
  auto second = StartJoiner(*seed, "second");
  REQUIRE(HostIdOf(*second) == Gid::Host(2));

  DaemonOptions options = LoopbackClusterMember("intruder");
  options.join = {seed->tcp_address().value()};
  options.host_id = 2;
  Daemon intruder(options);
  Status started = intruder.Start();
  REQUIRE_FALSE(started.ok());
  CHECK_THAT(started.message(),
             Catch::Contains("host id h2 belongs to another daemon") && Catch::Contains("second"));
  // Without --host-id it is given the next free id.
  DaemonOptions fixed = LoopbackClusterMember("newcomer");
  fixed.join = options.join;
  fixed.state_dir = intruder.state_dir();
  Daemon newcomer(fixed);
  REQUIRE(newcomer.Start().message() == "");
  CHECK(HostIdOf(newcomer) == Gid::Host(3));
}

TEST_CASE("a new daemon gives up when no seed answers within the join timeout",
          "[integration][cluster]") {
  DaemonOptions options = LoopbackClusterMember("lonely", {"--join-timeout", "0.5"});
  options.join = {"127.0.0.1:1"};
  Daemon lonely(options);
  Status started = lonely.Start();
  REQUIRE_FALSE(started.ok());
  CHECK_THAT(started.message(), Catch::Contains("exited during start-up") &&
                                    Catch::Contains("no seed answered within 0.5 s") &&
                                    Catch::Contains("127.0.0.1:1"));
}

TEST_CASE("thousands of threads registered on three hosts give equal query results on every host",
          "[integration][cluster]") {
  auto seed = StartSeed();
  auto second = StartJoiner(*seed, "second");
  auto third = StartJoiner(*seed, "third");
  std::vector<const Daemon*> all = {seed.get(), second.get(), third.get()};

  std::vector<std::unique_ptr<pb::Directory::Stub>> stubs;
  std::vector<std::unique_ptr<RawEnrollment>> processes;
  for (const Daemon* daemon : all) {
    stubs.push_back(NewRawStub(daemon->address()));
    EnrollAttempt attempt = RawEnroll(*stubs.back(), MakeRegister("loader", {{"tier", "a"}}));
    REQUIRE(Text(attempt.status) == "OK");
    processes.push_back(std::move(attempt.enrollment));
  }
  for (size_t i = 0; i < all.size(); ++i) RegisterThreads(*stubs[i], *processes[i], 1, 2000);

  REQUIRE(AllSee(all, "kind=thread", 6000));
  std::vector<std::string> expected = QueryAll(*seed, "kind=thread");
  CHECK(QueryAll(*second, "kind=thread") == expected);
  CHECK(QueryAll(*third, "kind=thread") == expected);
  // Attribute queries, host filters and small pages over several hosts' rows.
  for (const std::string& expression :
       {std::string("role=r1 and host=h2"), std::string("kind=process and tier=a"),
        std::string("name~worker-19* and host=h3")}) {
    INFO(expression);
    std::vector<std::string> reference = QueryAll(*seed, expression, 77);
    CHECK_FALSE(reference.empty());
    CHECK(QueryAll(*second, expression, 77) == reference);
    CHECK(QueryAll(*third, expression, 1000) == reference);
  }
  CHECK(QueryAll(*third, "role=r1 and host=h2").size() == 500);
}

TEST_CASE("a joiner killed with SIGKILL catches up when it restarts", "[integration][cluster]") {
  auto seed = StartSeed();
  auto second = StartJoiner(*seed, "second");
  auto third = StartJoiner(*seed, "third");
  auto seed_stub = NewRawStub(seed->address());
  auto second_stub = NewRawStub(second->address());
  EnrollAttempt on_seed = RawEnroll(*seed_stub, MakeRegister("a"));
  EnrollAttempt on_second = RawEnroll(*second_stub, MakeRegister("b"));
  REQUIRE(Text(on_seed.status) == "OK");
  REQUIRE(Text(on_second.status) == "OK");
  RegisterThreads(*seed_stub, *on_seed.enrollment, 1, 300);
  REQUIRE(AllSee({third.get()}, "kind=thread", 300));

  REQUIRE(third->Kill().message() == "");
  RegisterThreads(*seed_stub, *on_seed.enrollment, 301, 700);
  RegisterThreads(*second_stub, *on_second.enrollment, 1, 1000);
  REQUIRE(AllSee({seed.get(), second.get()}, "kind=thread", 2000));

  REQUIRE(third->Start().message() == "");
  CHECK(HostIdOf(*third) == Gid::Host(3));
  REQUIRE(AllSee({third.get()}, "kind=thread", 2000));
  CHECK(QueryAll(*third, "kind=thread") == QueryAll(*seed, "kind=thread"));
}

TEST_CASE("without the seed the others keep replicating and a member restarts on its own",
          "[integration][cluster]") {
  HeldPort seed_port;  // the seed comes back at the address the others joined
  auto seed = StartSeed({}, seed_port.address());
  auto second = StartJoiner(*seed, "second");
  auto third = StartJoiner(*seed, "third");
  REQUIRE(AllSee({second.get(), third.get()}, "kind=host", 3));
  REQUIRE(seed->Stop().value_or(-1) == 0);

  auto second_stub = NewRawStub(second->address());
  EnrollAttempt on_second = RawEnroll(*second_stub, MakeRegister("b"));
  REQUIRE(Text(on_second.status) == "OK");
  RegisterThreads(*second_stub, *on_second.enrollment, 1, 200);
  REQUIRE(AllSee({third.get()}, "host=h2 and kind=thread", 200));
  // The seed is down, and its host says so.
  CHECK(WaitUntil([&] { return StateOf(*third, Gid::Host(1)) == pb::UNREACHABLE; }, 5000ms));

  // A member with a recorded id starts without the seed, and catches up.
  REQUIRE(third->Stop().value_or(-1) == 0);
  RegisterThreads(*second_stub, *on_second.enrollment, 201, 100);
  REQUIRE(third->Start().message() == "");
  CHECK(HostIdOf(*third) == Gid::Host(3));
  REQUIRE(AllSee({third.get()}, "host=h2 and kind=thread", 300));
  auto third_stub = NewRawStub(third->address());
  EnrollAttempt on_third = RawEnroll(*third_stub, MakeRegister("c"));
  REQUIRE(Text(on_third.status) == "OK");
  RegisterThreads(*third_stub, *on_third.enrollment, 1, 50);
  REQUIRE(AllSee({second.get()}, "host=h3 and kind=thread", 50));

  // The seed comes back: it catches up too, and the member joins it.
  REQUIRE(seed->Start().message() == "");
  REQUIRE(AllSee({seed.get()}, "kind=thread", 350));
  CHECK(WaitUntil(
      [&] {
        return third->LogTail(20'000).find("joined the cluster through the seed") !=
               std::string::npos;
      },
      10'000ms));
}

TEST_CASE("a stopped daemon is marked unreachable within down_after and comes back caught up",
          "[integration][cluster]") {
  auto seed = StartSeed();
  auto second = StartJoiner(*seed, "second");
  auto third = StartJoiner(*seed, "third");
  auto third_stub = NewRawStub(third->address());
  EnrollAttempt on_third = RawEnroll(*third_stub, MakeRegister("c"));
  REQUIRE(Text(on_third.status) == "OK");
  RegisterThreads(*third_stub, *on_third.enrollment, 1, 10);
  const Gid thread = Gid::Thread(on_third.enrollment->gid(), 1);
  REQUIRE(WaitUntil([&] { return StateOf(*seed, thread) == pb::RUNNING; }, kConverge));
  REQUIRE(WaitUntil([&] { return StateOf(*second, thread) == pb::RUNNING; }, kConverge));

  REQUIRE(third->Signal(SIGSTOP).message() == "");
  const auto stopped = Clock::now();
  // The host's threads are looked at while it is still stopped: once it
  // runs again they may be back to RUNNING at any moment.
  bool down = WaitUntil(
      [&] {
        return StateOf(*seed, Gid::Host(3)) == pb::UNREACHABLE &&
               StateOf(*second, Gid::Host(3)) == pb::UNREACHABLE &&
               StateOf(*seed, thread) == pb::UNREACHABLE;
      },
      5000ms, 20ms);
  const auto noticed = Clock::now() - stopped;
  REQUIRE(third->Signal(SIGCONT).message() == "");
  REQUIRE(down);
  // down_after is 1 s from the last time it was heard, up to one heartbeat
  // interval (0.2 s) before the SIGSTOP; the detector's tick adds a little,
  // a loaded machine more.
  CHECK(noticed >= 750ms);
  CHECK(noticed < 4000ms);
  CHECK(StateOf(*seed, Gid::Host(2)) == pb::RUNNING);

  REQUIRE(WaitUntil(
      [&] {
        return StateOf(*seed, Gid::Host(3)) == pb::RUNNING &&
               StateOf(*second, Gid::Host(3)) == pb::RUNNING;
      },
      5000ms));
  CHECK(StateOf(*second, thread) == pb::RUNNING);
  RegisterThreads(*third_stub, *on_third.enrollment, 11, 90);
  REQUIRE(AllSee({seed.get(), second.get()}, "host=h3 and kind=thread", 100));
}

TEST_CASE("a replica further behind than the change log keeps gets a snapshot",
          "[integration][cluster]") {
  auto seed = StartSeed({"--change-log-keep", "50"});
  auto second = StartJoiner(*seed, "second", {"--change-log-keep", "50"});
  auto seed_stub = NewRawStub(seed->address());
  EnrollAttempt on_seed = RawEnroll(*seed_stub, MakeRegister("a"));
  REQUIRE(Text(on_seed.status) == "OK");
  RegisterThreads(*seed_stub, *on_seed.enrollment, 1, 20);
  REQUIRE(AllSee({second.get()}, "kind=thread", 20));

  REQUIRE(second->Kill().message() == "");
  RegisterThreads(*seed_stub, *on_seed.enrollment, 21, 480);
  pb::UnregisterThreadsRequest unregister;
  unregister.set_process(on_seed.enrollment->gid().raw());
  unregister.set_session_token(on_seed.enrollment->token());
  unregister.add_threads(Gid::Thread(on_seed.enrollment->gid(), 3).raw());
  {
    grpc::ClientContext context;
    pb::WriteResponse response;
    REQUIRE(Text(seed_stub->UnregisterThreads(&context, unregister, &response)) == "OK");
  }
  // The seed trims its log (once a second) past what the replica applied.
  REQUIRE(WaitUntil(
      [&] {
        auto db = DatabaseFile::Open(seed->db_path());
        return db.ok() &&
               db->QueryInt("SELECT value FROM meta WHERE key = 'trimmed_through'").value_or(0) >
                   100;
      },
      10'000ms, 50ms));

  REQUIRE(second->Start().message() == "");
  REQUIRE(AllSee({second.get()}, "kind=thread", 500));
  CHECK(QueryAll(*second, "host=h1") == QueryAll(*seed, "host=h1"));
  CHECK(StateOf(*second, Gid::Thread(on_seed.enrollment->gid(), 3)) == pb::EXITED);
  CHECK_THAT(seed->LogTail(20'000), Catch::Contains("sending a snapshot"));
  CHECK_THAT(second->LogTail(20'000), Catch::Contains("snapshot applied"));
  // And the stream goes on after the snapshot.
  RegisterThreads(*seed_stub, *on_seed.enrollment, 501, 10);
  REQUIRE(AllSee({second.get()}, "kind=thread", 510));
}

// A peer that speaks the Cluster protocol but lies: it is h9, and its
// replication stream also names an entity of h7. What only a broken or
// hostile daemon sends, so it is played by a raw gRPC server here.
class ForgingOrigin final : public pb::Cluster::Service {
 public:
  ForgingOrigin() {
    self_.set_host(Gid::Host(9).raw());
    self_.set_name("forger");
  }
  // Before anyone learns of it: then only gRPC threads read self_.
  void set_address(const std::string& address) { self_.set_address(address); }
  const pb::Member& self() const { return self_; }

  grpc::Status Heartbeat(grpc::ServerContext*, const pb::HeartbeatRequest*,
                         pb::HeartbeatResponse* response) override {
    *response->mutable_self() = self_;
    return grpc::Status::OK;
  }
  grpc::Status Replicate(grpc::ServerContext* context, const pb::ReplicateRequest*,
                         grpc::ServerWriter<pb::ReplicationBatch>* writer) override {
    pb::ReplicationBatch batch;
    const Gid gids[] = {Gid::Process(9, 1), Gid::Process(7, 1)};
    for (size_t i = 0; i < 2; ++i) {
      pb::ChangeEvent* event = batch.add_events();
      event->set_seq(i + 1);
      event->set_op(pb::CHANGE_OP_ADDED);
      event->set_gid(gids[i].raw());
      event->mutable_entity()->set_gid(gids[i].raw());
      event->mutable_entity()->set_kind(pb::PROCESS);
      event->mutable_entity()->set_name("forged");
      event->mutable_entity()->set_state(pb::RUNNING);
    }
    batch.set_head_seq(2);
    writer->Write(batch);
    // Held open like a real stream, until the replica drops it.
    WaitUntil([&] { return context->IsCancelled(); }, 5000ms);
    return grpc::Status::OK;
  }

 private:
  pb::Member self_;
};

TEST_CASE("a member whose replication stream names another host's entities is refused whole",
          "[integration][cluster]") {
  auto seed = StartSeed();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  ForgingOrigin forger;
  builder.RegisterService(&forger);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  REQUIRE(server);
  forger.set_address("127.0.0.1:" + std::to_string(port));

  // It introduces itself with a heartbeat, like any daemon that joined.
  auto cluster = pb::Cluster::NewStub(NewRawChannel(seed->tcp_address().value()));
  {
    grpc::ClientContext context;
    pb::HeartbeatRequest request;
    *request.mutable_from() = forger.self();
    pb::HeartbeatResponse response;
    REQUIRE(Text(cluster->Heartbeat(&context, request, &response)) == "OK");
    CHECK(Gid::FromRaw(response.self().host()) == Gid::Host(1));
  }
  REQUIRE(WaitUntil(
      [&] {
        return seed->LogTail(20'000).find("batch refused, stream dropped") != std::string::npos;
      },
      10'000ms));
  CHECK_THAT(seed->LogTail(20'000), Catch::Contains("a change of h7.p1 in the replication "
                                                    "stream of h9"));
  // Nothing of the batch was applied, not even its honest half.
  auto stub = NewRawStub(seed->address());
  CHECK(RawLookup(*stub, Gid::Process(9, 1).raw()).error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(RawLookup(*stub, Gid::Process(7, 1).raw()).error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(QueryAll(*seed, "name=forged").empty());
  server->Shutdown(std::chrono::system_clock::now() + 500ms);
}

TEST_CASE("a heartbeat from a daemon that claims this daemon's own host id is refused",
          "[integration][cluster]") {
  auto seed = StartSeed();
  auto cluster = pb::Cluster::NewStub(NewRawChannel(seed->tcp_address().value()));
  grpc::ClientContext context;
  pb::HeartbeatRequest request;
  request.mutable_from()->set_host(Gid::Host(1).raw());
  request.mutable_from()->set_name("twin");
  request.mutable_from()->set_address("127.0.0.1:1");
  pb::HeartbeatResponse response;
  grpc::Status status = cluster->Heartbeat(&context, request, &response);
  CHECK(status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_THAT(status.error_message(), Catch::Contains("h1 is this daemon's own host id"));
  // And Join is the seed's alone.
  auto second = StartJoiner(*seed, "second");
  auto to_second = pb::Cluster::NewStub(NewRawChannel(second->tcp_address().value()));
  grpc::ClientContext join_context;
  pb::JoinRequest join;
  join.set_node_key(std::string(32, 'e'));
  join.set_name("late");
  join.set_address("127.0.0.1:1");
  pb::JoinResponse joined;
  status = to_second->Join(&join_context, join, &joined);
  CHECK(status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_THAT(status.error_message(), Catch::Contains("h2 is not the seed"));
}

}  // namespace
}  // namespace tocl::testing
