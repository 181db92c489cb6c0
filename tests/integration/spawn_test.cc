// Spawning processes through a daemon: SpawnProcess answers once the
// program has enrolled with the Gid it was given; the daemon supervises it
// (exit status and signal recorded), signals it (Kill) and keeps its
// stdout/stderr (ReadLog). Requests through the raw stub over the daemon's
// unix socket, programs are tocl-spawned-child.
#include <signal.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "daemon_harness.h"
#include "raw_directory.h"
#include "status_assertions.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const std::string kChild = TOCL_SPAWNED_CHILD_PATH;

struct SpawnCall {
  grpc::Status status;
  pb::SpawnProcessResponse response;

  Gid gid() const { return Gid::FromRaw(response.gid()); }
};

SpawnCall Spawn(pb::Directory::Stub& stub, const pb::SpawnProcessRequest& request) {
  SpawnCall call;
  call.status = RawSpawn(stub, request, &call.response);
  return call;
}

grpc::Status ReadLog(pb::Directory::Stub& stub, Gid gid, pb::LogStream stream,
                     pb::ReadLogResponse* response, uint64_t offset = 0, uint32_t max_bytes = 0) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(10));
  pb::ReadLogRequest request;
  request.set_process(gid.raw());
  request.set_stream(stream);
  request.set_offset(offset);
  request.set_max_bytes(max_bytes);
  return stub.ReadLog(&context, request, response);
}

// The whole stdout of `gid` once the process has exited (the log says so).
std::string FinalStdout(pb::Directory::Stub& stub, Gid gid) {
  pb::ReadLogResponse log;
  const bool done = WaitUntil(
      [&] { return ReadLog(stub, gid, pb::LOG_STREAM_STDOUT, &log).ok() && log.process_exited(); },
      seconds(10));
  INFO("the log of " << gid.ToString() << " never said the process had exited");
  REQUIRE(done);
  return log.data();
}

// The process entity once it has exited.
pb::Entity ExitedEntity(pb::Directory::Stub& stub, Gid gid) {
  pb::Entity entity;
  const bool exited = WaitUntil(
      [&] { return RawLookup(stub, gid.raw(), &entity).ok() && entity.state() == pb::EXITED; },
      seconds(10));
  INFO(gid.ToString() << " never exited: " << entity.ShortDebugString());
  REQUIRE(exited);
  return entity;
}

#define REQUIRE_SPAWNED(call)      \
  do {                             \
    INFO(Describe((call).status)); \
    REQUIRE((call).status.ok());   \
  } while (false)

#define CHECK_CODE_AND_TEXT(status, code, text)                  \
  do {                                                           \
    const grpc::Status& checked_ = (status);                     \
    INFO(Describe(checked_));                                    \
    CHECK(checked_.error_code() == (code));                      \
    CHECK_THAT(checked_.error_message(), Catch::Contains(text)); \
  } while (false)

TEST_CASE("a spawned program enrolls with the gid the spawn returns, and its exit is recorded",
          "[integration][spawn]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto stub = NewRawStub(daemon.address());

  pb::SpawnProcessRequest request = SpawnRequest(
      kChild, {"--say", "hello from the child", "--complain", "a complaint", "--status", "3"});
  request.set_name("status-three");
  SpawnCall spawned = Spawn(*stub, request);
  REQUIRE_SPAWNED(spawned);
  const Gid gid = spawned.gid();
  CHECK(gid.is_process());
  CHECK(gid.host() == Gid::Host(1));
  CHECK(spawned.response.os_pid() > 0);
  CHECK(spawned.response.stdout_path() == daemon.state_dir() + "/logs/" + gid.ToString() + ".out");
  CHECK(spawned.response.stderr_path() == daemon.state_dir() + "/logs/" + gid.ToString() + ".err");

  const std::string out = FinalStdout(*stub, gid);
  CHECK_THAT(out, Catch::Contains("gid " + gid.ToString() + "\n"));
  CHECK_THAT(out, Catch::Contains("hello from the child\n"));
  pb::ReadLogResponse err;
  REQUIRE(ReadLog(*stub, gid, pb::LOG_STREAM_STDERR, &err).ok());
  CHECK(err.data() == "a complaint\n");

  pb::Entity entity = ExitedEntity(*stub, gid);
  CHECK(entity.name() == "status-three");
  CHECK(entity.os_pid() == spawned.response.os_pid());
  REQUIRE(entity.has_exit_status());
  CHECK(entity.exit_status() == 3);
  CHECK_FALSE(entity.has_exit_signal());
  CHECK_THAT(entity.exit_reason(), Catch::Contains("exited with status 3"));
}

TEST_CASE("a spawned program killed with a signal has the signal recorded",
          "[integration][spawn]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto stub = NewRawStub(daemon.address());

  SpawnCall spawned = Spawn(*stub, SpawnRequest(kChild, {"--then", "wait"}));
  REQUIRE_SPAWNED(spawned);
  const Gid gid = spawned.gid();
  pb::Entity running;
  REQUIRE(RawLookup(*stub, gid.raw(), &running).ok());
  CHECK(running.state() == pb::RUNNING);

  REQUIRE(RawKill(*stub, gid, SIGKILL).ok());
  pb::Entity entity = ExitedEntity(*stub, gid);
  REQUIRE(entity.has_exit_signal());
  CHECK(entity.exit_signal() == SIGKILL);
  CHECK_FALSE(entity.has_exit_status());
  CHECK_THAT(entity.exit_reason(), Catch::Contains("killed by signal 9 (SIGKILL)"));

  // Dead now: a second kill is refused.
  CHECK_CODE_AND_TEXT(RawKill(*stub, gid, SIGKILL), grpc::StatusCode::FAILED_PRECONDITION,
                      "has exited");
}

TEST_CASE("a spawned program that dies without closing its session has its status recorded",
          "[integration][spawn]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto stub = NewRawStub(daemon.address());

  SpawnCall spawned = Spawn(*stub, SpawnRequest(kChild, {"--then", "crash", "--status", "7"}));
  REQUIRE_SPAWNED(spawned);
  pb::Entity entity = ExitedEntity(*stub, spawned.gid());
  REQUIRE(entity.has_exit_status());
  CHECK(entity.exit_status() == 7);
  CHECK_THAT(entity.exit_reason(), Catch::StartsWith("exited with status 7"));
}

TEST_CASE("SIGTERM ends a spawned program: it does not inherit the daemon's blocked signals",
          "[integration][spawn]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto stub = NewRawStub(daemon.address());

  SpawnCall spawned = Spawn(*stub, SpawnRequest(kChild, {"--then", "wait"}));
  REQUIRE_SPAWNED(spawned);
  // Signal 0 means SIGTERM.
  REQUIRE(RawKill(*stub, spawned.gid(), 0).ok());
  pb::Entity entity = ExitedEntity(*stub, spawned.gid());
  REQUIRE(entity.has_exit_signal());
  CHECK(entity.exit_signal() == SIGTERM);
  CHECK_THAT(entity.exit_reason(), Catch::Contains("killed by signal 15 (SIGTERM)"));
}

TEST_CASE(
    "a spawned program gets its identity, the request's env and none of the daemon's "
    "TOCL_ variables",
    "[integration][spawn]") {
  DaemonOptions options;
  // env execs toclsd: the daemon runs with TOCL_LEAK set.
  options.command_prefix = {"/usr/bin/env", "TOCL_LEAK=from-the-daemon", "SHARED=daemon"};
  Daemon daemon(options);
  REQUIRE_OK(daemon.Start());
  auto stub = NewRawStub(daemon.address());

  pb::SpawnProcessRequest request =
      SpawnRequest(kChild, {"--print-env", "TOCL_LEAK", "--print-env", "SHARED", "--print-env",
                            "EXTRA", "--print-env", "TOCL_PARENT", "--print-env", "TOCL_DAEMON",
                            "--print-env", "TOCL_PROCESS_GID", "--print-cwd"});
  request.add_env("EXTRA=x=y z");
  request.add_env("SHARED=request");
  request.set_parent(Gid::Thread(1, 77, 3).raw());
  SpawnCall spawned = Spawn(*stub, request);
  REQUIRE_SPAWNED(spawned);
  const std::string out = FinalStdout(*stub, spawned.gid());
  CHECK_THAT(out, Catch::Contains("env TOCL_LEAK unset\n"));
  CHECK_THAT(out, Catch::Contains("env SHARED=request\n"));
  CHECK_THAT(out, Catch::Contains("env EXTRA=x=y z\n"));
  CHECK_THAT(out, Catch::Contains("env TOCL_PARENT=h1.p77.t3\n"));
  CHECK_THAT(out, Catch::Contains("env TOCL_DAEMON=" + daemon.address() + "\n"));
  CHECK_THAT(out, Catch::Contains("env TOCL_PROCESS_GID=" + spawned.gid().ToString() + "\n"));
  // The default working directory is the daemon's state directory.
  CHECK_THAT(out, Catch::Contains("cwd " + daemon.state_dir() + "\n"));
  pb::Entity entity = ExitedEntity(*stub, spawned.gid());
  CHECK(Gid::FromRaw(entity.parent()) == Gid::Thread(1, 77, 3));

  pb::SpawnProcessRequest elsewhere = SpawnRequest(kChild, {"--print-cwd"});
  elsewhere.set_working_directory("/tmp");
  SpawnCall moved = Spawn(*stub, elsewhere);
  REQUIRE_SPAWNED(moved);
  CHECK_THAT(FinalStdout(*stub, moved.gid()), Catch::Contains("cwd /tmp\n"));
}

TEST_CASE("a missing or non-executable program is refused before anything starts",
          "[integration][spawn]") {
  // The script below must pass the allow list to reach exec(2).
  TempDir scripts("toclsd-scripts-");
  DaemonOptions options;
  options.spawn_allow.push_back(scripts.path() + "/*");
  Daemon daemon(options);
  REQUIRE_OK(daemon.Start());
  auto stub = NewRawStub(daemon.address());
  uint64_t before = 0;
  REQUIRE(RawPing(*stub, &before).ok());

  CHECK_CODE_AND_TEXT(Spawn(*stub, SpawnRequest("/no/such/program")).status,
                      grpc::StatusCode::NOT_FOUND, "no such executable /no/such/program");
  CHECK_CODE_AND_TEXT(Spawn(*stub, SpawnRequest("tocl-no-such-program-anywhere")).status,
                      grpc::StatusCode::NOT_FOUND,
                      "no such executable 'tocl-no-such-program-anywhere' in the daemon's PATH");
  const std::string text_file = daemon.state_dir() + "/not-a-program";
  {
    std::ofstream file(text_file);
    file << "just text\n";
  }
  CHECK_CODE_AND_TEXT(Spawn(*stub, SpawnRequest(text_file)).status,
                      grpc::StatusCode::PERMISSION_DENIED, text_file + " is not executable");
  CHECK_CODE_AND_TEXT(Spawn(*stub, SpawnRequest("/tmp")).status,
                      grpc::StatusCode::PERMISSION_DENIED, "/tmp is not executable");
  // Relative paths are relative to the working directory.
  pb::SpawnProcessRequest relative = SpawnRequest("./not-a-program");
  relative.set_working_directory(daemon.state_dir());
  CHECK_CODE_AND_TEXT(Spawn(*stub, relative).status, grpc::StatusCode::PERMISSION_DENIED,
                      text_file + " is not executable");
  pb::SpawnProcessRequest no_dir = SpawnRequest(kChild);
  no_dir.set_working_directory("/no/such/dir");
  CHECK_CODE_AND_TEXT(Spawn(*stub, no_dir).status, grpc::StatusCode::NOT_FOUND,
                      "working directory /no/such/dir does not exist");
  CHECK_CODE_AND_TEXT(Spawn(*stub, SpawnRequest("")).status, grpc::StatusCode::INVALID_ARGUMENT,
                      "no executable given");

  // Nothing was reserved for any of them.
  uint64_t after = 0;
  REQUIRE(RawPing(*stub, &after).ok());
  CHECK(after == before);

  // Only exec(2) finds that a script's interpreter is missing: its row
  // says it could not be started.
  const std::string script = scripts.File("script");
  {
    std::ofstream file(script);
    file << "#!/no/such/interpreter\n";
  }
  REQUIRE(::chmod(script.c_str(), 0755) == 0);
  pb::SpawnProcessRequest scripted = SpawnRequest(script);
  scripted.set_name("script");
  CHECK_CODE_AND_TEXT(Spawn(*stub, scripted).status, grpc::StatusCode::NOT_FOUND,
                      "the interpreter its #! line names is missing");
  pb::QueryResponse rows;
  REQUIRE(RawQuery(*stub, "kind=process and name=script", {}, &rows).ok());
  REQUIRE(rows.entities_size() == 1);
  CHECK(rows.entities(0).state() == pb::EXITED);
  CHECK_THAT(rows.entities(0).exit_reason(), Catch::StartsWith("could not be started: "));
}

TEST_CASE("bad env entries are refused, naming the entry", "[integration][spawn]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto stub = NewRawStub(daemon.address());

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"NO_EQUALS", "env[0] 'NO_EQUALS' is not KEY=VALUE"},
      {"1X=2", "env[0]: '1X' is not a variable name"},
      {"A-B=2", "env[0]: 'A-B' is not a variable name"},
      {"=2", "env[0]: '' is not a variable name"},
      {"TOCL_PROCESS_GID=h1.p9", "env[0]: TOCL_PROCESS_GID is set by the daemon"},
      {"TOCL_SPAWN_TOKEN=00", "env[0]: TOCL_SPAWN_TOKEN is set by the daemon"},
  };
  for (const auto& [entry, message] : bad) {
    pb::SpawnProcessRequest request = SpawnRequest(kChild);
    request.add_env(entry);
    INFO(entry);
    CHECK_CODE_AND_TEXT(Spawn(*stub, request).status, grpc::StatusCode::INVALID_ARGUMENT, message);
  }
  pb::SpawnProcessRequest twice = SpawnRequest(kChild);
  twice.add_env("A=1");
  twice.add_env("A=2");
  CHECK_CODE_AND_TEXT(Spawn(*stub, twice).status, grpc::StatusCode::INVALID_ARGUMENT,
                      "env[1]: A is given twice");
}

TEST_CASE("a program that exits before it enrolls fails the spawn with its exit status",
          "[integration][spawn]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto stub = NewRawStub(daemon.address());

  SpawnCall call =
      Spawn(*stub, SpawnRequest(kChild, {"--no-enroll", "--say", "bye", "--status", "3"}));
  CHECK_CODE_AND_TEXT(call.status, grpc::StatusCode::ABORTED,
                      "exited with status 3 before it enrolled; see `tocl logs h1.p");
  // Found by bare name in the daemon's PATH.
  CHECK_CODE_AND_TEXT(Spawn(*stub, SpawnRequest("false")).status, grpc::StatusCode::ABORTED,
                      "exited with status 1 before it enrolled");

  // Its row and its log tell the same.
  pb::QueryResponse processes;
  REQUIRE(RawQuery(*stub, "kind=process and name=tocl-spawned-child", {}, &processes).ok());
  REQUIRE(processes.entities_size() == 1);
  const pb::Entity& entity = processes.entities(0);
  CHECK(entity.state() == pb::EXITED);
  CHECK(entity.exit_status() == 3);
  CHECK(entity.exit_reason() == "exited with status 3 before it enrolled");
  CHECK(FinalStdout(*stub, Gid::FromRaw(entity.gid())) == "bye\n");
}

TEST_CASE("a program that never enrolls is killed at the enroll timeout", "[integration][spawn]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto stub = NewRawStub(daemon.address());

  pb::SpawnProcessRequest request = SpawnRequest("/bin/sleep", {"60"});
  request.set_name("sleeper");
  request.set_enroll_timeout_ms(300);
  const auto start = std::chrono::steady_clock::now();
  SpawnCall call = Spawn(*stub, request);
  CHECK(std::chrono::steady_clock::now() - start < seconds(5));
  CHECK_CODE_AND_TEXT(call.status, grpc::StatusCode::DEADLINE_EXCEEDED,
                      "(/bin/sleep) did not enroll within 300 ms; it was killed;");

  // Reaped: the row says it was killed, so the sleep is gone.
  pb::QueryResponse processes;
  REQUIRE(RawQuery(*stub, "kind=process and name=sleeper", {}, &processes).ok());
  REQUIRE(processes.entities_size() == 1);
  const pb::Entity& entity = processes.entities(0);
  CHECK(entity.state() == pb::EXITED);
  CHECK(entity.exit_signal() == SIGKILL);
  CHECK(entity.exit_reason() == "did not enroll within 300 ms; killed by signal 9 (SIGKILL)");
}

TEST_CASE("placement: a named host, a where expression, or bad combinations",
          "[integration][spawn]") {
  DaemonOptions options;
  options.extra_args = {"--attribute", "gpu=1", "--attribute", "rack=r7"};
  Daemon daemon(options);
  REQUIRE_OK(daemon.Start());
  auto stub = NewRawStub(daemon.address());

  // The attributes are on the host entity, beside networks.
  pb::Entity host;
  REQUIRE(RawLookup(*stub, Gid::Host(1).raw(), &host).ok());
  std::map<std::string, std::string> attributes;
  for (const pb::Attribute& attribute : host.attributes()) {
    attributes[attribute.key()] = attribute.value();
  }
  CHECK(attributes["gpu"] == "1");
  CHECK(attributes["rack"] == "r7");
  CHECK(attributes.contains("networks"));

  pb::SpawnProcessRequest here = SpawnRequest(kChild);
  here.set_host(Gid::Host(1).raw());
  SpawnCall named = Spawn(*stub, here);
  REQUIRE_SPAWNED(named);
  CHECK(named.gid().host() == Gid::Host(1));

  pb::SpawnProcessRequest gpu = SpawnRequest(kChild);
  gpu.set_where("gpu=1 and rack~r*");
  SpawnCall placed = Spawn(*stub, gpu);
  REQUIRE_SPAWNED(placed);
  CHECK(placed.gid().host() == Gid::Host(1));

  pb::SpawnProcessRequest unknown = SpawnRequest(kChild);
  unknown.set_host(Gid::Host(9).raw());
  CHECK_CODE_AND_TEXT(Spawn(*stub, unknown).status, grpc::StatusCode::NOT_FOUND,
                      "host h9 is not a member of this cluster");

  pb::SpawnProcessRequest both = SpawnRequest(kChild);
  both.set_host(Gid::Host(1).raw());
  both.set_where("gpu=1");
  CHECK_CODE_AND_TEXT(Spawn(*stub, both).status, grpc::StatusCode::INVALID_ARGUMENT, "not both");

  pb::SpawnProcessRequest none = SpawnRequest(kChild);
  none.set_where("gpu=2");
  CHECK_CODE_AND_TEXT(Spawn(*stub, none).status, grpc::StatusCode::NOT_FOUND,
                      "no host matches 'gpu=2'");

  pb::SpawnProcessRequest bad = SpawnRequest(kChild);
  bad.set_where("gpu==1");
  CHECK_CODE_AND_TEXT(Spawn(*stub, bad).status, grpc::StatusCode::INVALID_ARGUMENT,
                      "where: query: at position 4");

  pb::SpawnProcessRequest not_host = SpawnRequest(kChild);
  not_host.set_host(Gid::Process(1, 2).raw());
  CHECK_CODE_AND_TEXT(Spawn(*stub, not_host).status, grpc::StatusCode::INVALID_ARGUMENT,
                      "h1.p2 is not a host id");
}

TEST_CASE("kill refuses threads, bad signals and unknown processes", "[integration][spawn]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto stub = NewRawStub(daemon.address());

  CHECK_CODE_AND_TEXT(RawKill(*stub, Gid::Thread(1, 4, 2), SIGTERM),
                      grpc::StatusCode::INVALID_ARGUMENT,
                      "h1.p4.t2 is a thread: threads cannot be killed, kill its process h1.p4");
  CHECK_CODE_AND_TEXT(RawKill(*stub, Gid::Host(1), SIGTERM), grpc::StatusCode::INVALID_ARGUMENT,
                      "h1 is not a process id");
  CHECK_CODE_AND_TEXT(RawKill(*stub, Gid::Process(1, 4), 65), grpc::StatusCode::INVALID_ARGUMENT,
                      "signal 65 is outside 1..64");
  CHECK_CODE_AND_TEXT(RawKill(*stub, Gid::Process(1, 4), -1), grpc::StatusCode::INVALID_ARGUMENT,
                      "signal -1 is outside 1..64");
  CHECK_CODE_AND_TEXT(RawKill(*stub, Gid::Process(1, 4), SIGTERM), grpc::StatusCode::NOT_FOUND,
                      "no process h1.p4");
  CHECK_CODE_AND_TEXT(RawKill(*stub, Gid::Process(5, 4), SIGTERM), grpc::StatusCode::NOT_FOUND,
                      "host h5 is not a member of this cluster");
}

TEST_CASE("read log: offsets, sizes, and processes without logs", "[integration][spawn]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto stub = NewRawStub(daemon.address());

  SpawnCall spawned = Spawn(*stub, SpawnRequest(kChild, {"--bytes", "100000", "--then", "wait"}));
  REQUIRE_SPAWNED(spawned);
  const Gid gid = spawned.gid();
  const std::string header = "gid " + gid.ToString() + "\n";
  const uint64_t total = header.size() + 100000;
  pb::ReadLogResponse log;
  // Written, but the process runs on.
  REQUIRE(WaitUntil(
      [&] { return ReadLog(*stub, gid, pb::LOG_STREAM_STDOUT, &log).ok() && log.size() == total; },
      seconds(10)));
  CHECK_FALSE(log.process_exited());
  CHECK(log.data().size() == total);
  CHECK(log.data().substr(0, header.size() + 12) == header + "012345678901");

  REQUIRE(ReadLog(*stub, gid, pb::LOG_STREAM_STDOUT, &log, header.size() + 5, 7).ok());
  CHECK(log.data() == "5678901");
  CHECK(log.size() == total);
  REQUIRE(ReadLog(*stub, gid, pb::LOG_STREAM_STDOUT, &log, total - 3).ok());
  CHECK(log.data() == "789");
  REQUIRE(ReadLog(*stub, gid, pb::LOG_STREAM_STDOUT, &log, total + 100).ok());
  CHECK(log.data().empty());
  CHECK(log.size() == total);
  REQUIRE(ReadLog(*stub, gid, pb::LOG_STREAM_STDERR, &log).ok());
  CHECK(log.data().empty());
  CHECK(log.size() == 0);

  REQUIRE(RawKill(*stub, gid, SIGKILL).ok());
  REQUIRE(WaitUntil(
      [&] { return ReadLog(*stub, gid, pb::LOG_STREAM_STDOUT, &log).ok() && log.process_exited(); },
      seconds(10)));
  CHECK(log.size() == total);

  // A process that enrolled by itself has no logs.
  EnrollAttempt enrolled = RawEnroll(*stub, MakeRegister("by-itself"));
  REQUIRE(enrolled.status.ok());
  CHECK_CODE_AND_TEXT(
      ReadLog(*stub, enrolled.enrollment->gid(), pb::LOG_STREAM_STDOUT, &log),
      grpc::StatusCode::NOT_FOUND,
      enrolled.enrollment->gid().ToString() + " was not spawned by a daemon, so it has no logs");
  CHECK_CODE_AND_TEXT(ReadLog(*stub, Gid::Process(1, 999), pb::LOG_STREAM_STDOUT, &log),
                      grpc::StatusCode::NOT_FOUND, "no process h1.p999");
  CHECK_CODE_AND_TEXT(ReadLog(*stub, Gid::Thread(1, 2, 3), pb::LOG_STREAM_STDOUT, &log),
                      grpc::StatusCode::INVALID_ARGUMENT, "h1.p2.t3 is a thread");
}

TEST_CASE("a program started by a spawned one does not take its identity", "[integration][spawn]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto stub = NewRawStub(daemon.address());

  SpawnCall spawned = Spawn(*stub, SpawnRequest(kChild, {"--then", "wait"}));
  REQUIRE_SPAWNED(spawned);
  const Gid gid = spawned.gid();
  const pid_t pid = static_cast<pid_t>(spawned.response.os_pid());
  const std::string token = EnvironmentOf(pid, "TOCL_SPAWN_TOKEN");
  REQUIRE(token.size() == 32);

  // What a program the spawned one starts would inherit.
  SpawnOptions options;
  options.env = {"TOCL_DAEMON=" + daemon.address(), "TOCL_PROCESS_GID=" + gid.ToString(),
                 "TOCL_SPAWN_TOKEN=" + token};
  auto inheritor = REQUIRE_VALUE(ChildProcess::Spawn({kChild}, options));
  const int inheritor_status = REQUIRE_VALUE(inheritor.Wait(seconds(20)));
  const std::string out = inheritor.Output();
  INFO(out);
  REQUIRE(inheritor_status == 0);
  CHECK_THAT(out, Catch::Contains("gid h1.p"));
  CHECK_THAT(out, !Catch::Contains("gid " + gid.ToString() + "\n"));

  // The spawned process kept its row and its session.
  pb::Entity entity;
  REQUIRE(RawLookup(*stub, gid.raw(), &entity).ok());
  CHECK(entity.state() == pb::RUNNING);
  CHECK(entity.os_pid() == pid);
  REQUIRE(RawKill(*stub, gid, SIGKILL).ok());
  CHECK(ExitedEntity(*stub, gid).exit_signal() == SIGKILL);

  // A malformed identity is the enrolling program's clear error.
  SpawnOptions bad;
  bad.env = {"TOCL_DAEMON=" + daemon.address(), "TOCL_PROCESS_GID=" + gid.ToString(),
             "TOCL_SPAWN_TOKEN=zz"};
  auto refused = REQUIRE_VALUE(ChildProcess::Spawn({kChild}, bad));
  CHECK(REQUIRE_VALUE(refused.Wait(seconds(20))) == 100);
  CHECK_THAT(refused.Output(), Catch::Contains("TOCL_SPAWN_TOKEN is not hex"));
}

// The attributes of an entity, as a map.
std::map<std::string, std::string> AttributesOf(const pb::Entity& entity) {
  std::map<std::string, std::string> attributes;
  for (const pb::Attribute& attribute : entity.attributes()) {
    attributes[attribute.key()] = attribute.value();
  }
  return attributes;
}

TEST_CASE("a spawned program keeps its own name and attributes, and on a clash the spawn's win",
          "[integration][spawn]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto stub = NewRawStub(daemon.address());
  auto with_attributes = [](pb::SpawnProcessRequest request,
                            const std::map<std::string, std::string>& attributes) {
    for (const auto& [key, value] : attributes) {
      pb::Attribute* attribute = request.add_attributes();
      attribute->set_key(key);
      attribute->set_value(value);
    }
    return request;
  };

  SECTION("both name it and set a key: the spawn's name and value, the program's others added") {
    pb::SpawnProcessRequest request =
        with_attributes(SpawnRequest(kChild, {"--runtime", "--name", "child-own", "--attribute",
                                              "role=worker", "--attribute", "version=2"}),
                        {{"role", "merger"}, {"shard", "3"}});
    request.set_name("from-spawn");
    SpawnCall spawned = Spawn(*stub, request);
    REQUIRE_SPAWNED(spawned);
    const pb::Entity entity = ExitedEntity(*stub, spawned.gid());
    CHECK(entity.name() == "from-spawn");
    CHECK(AttributesOf(entity) ==
          std::map<std::string, std::string>{{"role", "merger"}, {"shard", "3"}, {"version", "2"}});
  }
  SECTION("the spawn gives no name: the program's own") {
    SpawnCall spawned =
        Spawn(*stub, with_attributes(SpawnRequest(kChild, {"--runtime", "--name", "child-own"}),
                                     {{"shard", "3"}}));
    REQUIRE_SPAWNED(spawned);
    const pb::Entity entity = ExitedEntity(*stub, spawned.gid());
    CHECK(entity.name() == "child-own");
    CHECK(AttributesOf(entity) == std::map<std::string, std::string>{{"shard", "3"}});
  }
  SECTION("neither names it: the executable's file name, whole") {
    // The runtime's default name is argv[0]'s file name, not the 15 bytes
    // of /proc/self/comm ("tocl-spawned-ch").
    SpawnCall spawned = Spawn(*stub, SpawnRequest(kChild, {"--runtime", "--name", ""}));
    REQUIRE_SPAWNED(spawned);
    CHECK(ExitedEntity(*stub, spawned.gid()).name() == "tocl-spawned-child");
  }
  SECTION("too many attributes together: the program's Start fails, saying so") {
    std::map<std::string, std::string> spawn_attributes;
    std::vector<std::string> args = {"--runtime"};
    for (int i = 0; i < 40; ++i) spawn_attributes["s" + std::to_string(i)] = "1";
    for (int i = 0; i < 30; ++i) {
      args.push_back("--attribute");
      args.push_back("c" + std::to_string(i) + "=1");
    }
    SpawnCall spawned = Spawn(*stub, with_attributes(SpawnRequest(kChild, args), spawn_attributes));
    CHECK_CODE_AND_TEXT(spawned.status, grpc::StatusCode::ABORTED,
                        "exited with status 100 before it enrolled");
    pb::QueryResponse processes;
    REQUIRE(RawQuery(*stub, "kind=process and s0=1", {}, &processes).ok());
    REQUIRE(processes.entities_size() == 1);
    const Gid gid = Gid::FromRaw(processes.entities(0).gid());
    pb::ReadLogResponse err;
    REQUIRE(WaitUntil(
        [&] {
          return ReadLog(*stub, gid, pb::LOG_STREAM_STDERR, &err).ok() &&
                 err.data().find("start:") != std::string::npos;
        },
        seconds(10)));
    CHECK_THAT(err.data(), Catch::Contains("invalid argument"));
    CHECK_THAT(err.data(), Catch::Contains("make 70 (at most 64)"));
  }
}

TEST_CASE("a spawned program outlives a daemon restart and re-enrolls with its gid",
          "[integration][spawn]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  SpawnCall spawned;
  {
    auto stub = NewRawStub(daemon.address());
    spawned = Spawn(*stub, SpawnRequest(kChild, {"--then", "wait"}));
  }
  REQUIRE_SPAWNED(spawned);
  const Gid gid = spawned.gid();
  const pid_t pid = static_cast<pid_t>(spawned.response.os_pid());

  REQUIRE(REQUIRE_VALUE(daemon.Stop()) == 0);
  CHECK(::kill(pid, 0) == 0);  // still running
  REQUIRE_OK(daemon.Start());
  const std::string reenrolled = "process " + gid.ToString() + " 'spawned-child' (pid " +
                                 std::to_string(pid) + ") re-enrolled";
  REQUIRE(WaitUntil([&] { return daemon.LogTail(20000).find(reenrolled) != std::string::npos; },
                    seconds(20)));

  // No longer this daemon's child: signalled through the pidfd of its
  // re-enrollment, whose pid the new daemon verified; how it ended is
  // unknown to it.
  auto stub = NewRawStub(daemon.address());
  REQUIRE(RawKill(*stub, gid, SIGTERM).ok());
  pb::Entity entity = ExitedEntity(*stub, gid);
  CHECK_FALSE(entity.has_exit_status());
  CHECK_FALSE(entity.has_exit_signal());
  CHECK_THAT(entity.exit_reason(), Catch::Contains("enroll stream broken"));
  CHECK(WaitUntil([&] { return ::kill(pid, 0) != 0; }, seconds(10)));
}

TEST_CASE("spawn, kill and logs are forwarded to the daemon of the chosen host",
          "[integration][spawn][cluster]") {
  DaemonOptions seed_options = LoopbackClusterMember("seed");
  seed_options.seed = true;
  Daemon seed(seed_options);
  REQUIRE_OK(seed.Start());
  DaemonOptions joiner_options = LoopbackClusterMember("gpu-node", {"--attribute", "gpu=1"});
  joiner_options.join = {REQUIRE_VALUE(seed.tcp_address())};
  Daemon joiner(joiner_options);
  REQUIRE_OK(joiner.Start());

  // The seed knows the joiner's host, its address and its attributes.
  auto stub = NewRawStub(seed.address());
  const Gid remote = WaitForHost(*stub, "kind=host and gpu=1");
  REQUIRE(remote.valid());
  REQUIRE(remote != Gid::Host(1));

  // Placed by attribute, on the joiner, asked of the seed.
  pb::SpawnProcessRequest request =
      SpawnRequest(kChild, {"--say", "on the gpu node", "--then", "wait"});
  request.set_where("gpu=1");
  SpawnCall spawned = Spawn(*stub, request);
  REQUIRE_SPAWNED(spawned);
  const Gid gid = spawned.gid();
  CHECK(gid.host() == remote);
  CHECK(spawned.response.stdout_path() == joiner.state_dir() + "/logs/" + gid.ToString() + ".out");

  pb::ReadLogResponse log;
  REQUIRE(WaitUntil(
      [&] {
        return ReadLog(*stub, gid, pb::LOG_STREAM_STDOUT, &log).ok() &&
               log.data().find("on the gpu node\n") != std::string::npos;
      },
      seconds(10)));
  CHECK_FALSE(log.process_exited());

  REQUIRE(RawKill(*stub, gid, SIGKILL).ok());
  auto joiner_stub = NewRawStub(joiner.address());
  CHECK(ExitedEntity(*joiner_stub, gid).exit_signal() == SIGKILL);

  // Errors from the other daemon say where they come from.
  pb::SpawnProcessRequest missing = SpawnRequest("/no/such/program");
  missing.set_host(remote.raw());
  CHECK_CODE_AND_TEXT(Spawn(*stub, missing).status, grpc::StatusCode::NOT_FOUND,
                      "on " + remote.ToString() + ": no such executable /no/such/program");

  // A host that is down takes no processes.
  REQUIRE_OK(joiner.Kill());
  pb::Entity host;
  REQUIRE(WaitUntil(
      [&] { return RawLookup(*stub, remote.raw(), &host).ok() && host.state() == pb::UNREACHABLE; },
      seconds(20)));
  pb::SpawnProcessRequest named = SpawnRequest(kChild);
  named.set_host(remote.raw());
  CHECK_CODE_AND_TEXT(Spawn(*stub, named).status, grpc::StatusCode::UNAVAILABLE,
                      "host " + remote.ToString() + " is down");
  CHECK_CODE_AND_TEXT(Spawn(*stub, request).status, grpc::StatusCode::UNAVAILABLE,
                      "every host that matches 'gpu=1' is down");
  CHECK_CODE_AND_TEXT(RawKill(*stub, gid, SIGKILL), grpc::StatusCode::UNAVAILABLE,
                      "host " + remote.ToString() + " is down");
}

}  // namespace
}  // namespace tocl::testing
