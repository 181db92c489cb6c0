// Who and what a daemon spawns (toclsd/spawn/README.md, Security): only the
// programs `[spawn] allow` names, by real path, checked before anything is
// reserved and by the daemon that would run the program; every refusal is
// PERMISSION_DENIED and logged with the caller. With run_as, programs run as
// that user (root tests only) and still enroll.
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "daemon_harness.h"
#include "raw_directory.h"
#include "status_assertions.h"
#include "unprivileged.h"

namespace tocl::testing {
namespace {

using std::chrono::seconds;

const std::string kChild = TOCL_SPAWNED_CHILD_PATH;

#define CHECK_REFUSED(status, text)                                      \
  do {                                                                   \
    const grpc::Status refused_ = (status);                              \
    INFO(Describe(refused_));                                            \
    CHECK(refused_.error_code() == grpc::StatusCode::PERMISSION_DENIED); \
    CHECK_THAT(refused_.error_message(), Catch::Contains(text));         \
  } while (false)

uint64_t HeadSeq(pb::Directory::Stub& stub) {
  uint64_t head = 0;
  const grpc::Status ping = RawPing(stub, &head);
  INFO(Describe(ping));
  REQUIRE(ping.ok());
  return head;
}

int ProcessCount(pb::Directory::Stub& stub) {
  pb::QueryResponse processes;
  const grpc::Status query = RawQuery(stub, "kind=process", {}, &processes);
  INFO(Describe(query));
  REQUIRE(query.ok());
  return processes.entities_size();
}

void WriteScript(const std::string& path) {
  {
    std::ofstream file(path);
    file << "#!/bin/sh\nexit 0\n";
  }
  REQUIRE(::chmod(path.c_str(), 0755) == 0);
}

// The value of `field` ("Uid", "Gid", "Groups") in /proc/<pid>/status.
std::string ProcStatusField(pid_t pid, const std::string& field) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(file, line)) {
    if (line.starts_with(field + ":")) {
      std::istringstream values(line.substr(field.size() + 1));
      std::string value, joined;
      while (values >> value) joined += (joined.empty() ? "" : " ") + value;
      return joined;
    }
  }
  return "(no " + field + " in /proc/" + std::to_string(pid) + "/status)";
}

TEST_CASE(
    "a program outside the allow list is refused by its real path, nothing is reserved, and "
    "the refusal is logged with the caller",
    "[integration][spawn][security]") {
  TempDir links("toclsd-links-");
  TempDir nested("toclsd-nested-");
  const std::string outside_link = links.File("outside");
  const std::string inside_link = links.File("inside");
  std::filesystem::create_symlink("/usr/bin/true", outside_link);
  std::filesystem::create_symlink(kChild, inside_link);
  std::filesystem::create_directory(nested.File("sub"));
  WriteScript(nested.File("sub/program"));

  DaemonOptions options;
  options.spawn_allow.push_back(links.path() + "/*");
  options.spawn_allow.push_back(nested.path() + "/*");
  Daemon daemon(options);
  REQUIRE_OK(daemon.Start());
  auto stub = NewRawStub(daemon.address());
  const uint64_t head = HeadSeq(*stub);

  CHECK_REFUSED(RawSpawn(*stub, SpawnRequest("/usr/bin/true")),
                "h1 does not allow spawning /usr/bin/true (not in [spawn] allow)");
  // A link in an allowed directory is judged by where it points.
  CHECK_REFUSED(RawSpawn(*stub, SpawnRequest(outside_link)),
                "h1 does not allow spawning " + outside_link +
                    " (real path /usr/bin/true) (not in [spawn] allow)");
  // A bare name is judged by the file the daemon's PATH finds.
  CHECK_REFUSED(RawSpawn(*stub, SpawnRequest("true")), "h1 does not allow spawning /");
  // '*' does not cross a '/'.
  CHECK_REFUSED(RawSpawn(*stub, SpawnRequest(nested.File("sub/program"))),
                "h1 does not allow spawning " + nested.File("sub/program"));

  CHECK(HeadSeq(*stub) == head);
  CHECK(ProcessCount(*stub) == 0);
  const std::string log = daemon.LogTail(20000);
  // The caller as the kernel names it: this test process.
  const std::string caller =
      fmt::format("for uid {} (pid {}) on the unix socket", ::geteuid(), ::getpid());
  CHECK_THAT(log, Catch::Contains("refused to spawn /usr/bin/true " + caller));
  CHECK_THAT(log, Catch::Contains("refused to spawn " + outside_link +
                                  " (real path /usr/bin/true) " + caller));

  // A link to an allowed program is allowed: it is the program that counts.
  pb::SpawnProcessResponse spawned;
  const grpc::Status through_link = RawSpawn(*stub, SpawnRequest(inside_link), &spawned);
  INFO(Describe(through_link));
  CHECK(through_link.ok());
  CHECK(Gid::FromRaw(spawned.gid()).is_process());
}

TEST_CASE("without an allow list spawning is disabled and says how to enable it",
          "[integration][spawn][security]") {
  DaemonOptions options;
  options.spawn_allow.clear();
  Daemon daemon(options);
  REQUIRE_OK(daemon.Start());
  auto stub = NewRawStub(daemon.address());
  const uint64_t head = HeadSeq(*stub);

  CHECK_REFUSED(RawSpawn(*stub, SpawnRequest(kChild)),
                "spawn is disabled on h1: toclsd's configuration has no [spawn] allow list");
  CHECK_REFUSED(RawSpawn(*stub, SpawnRequest(kChild)), "--spawn-allow");
  CHECK(HeadSeq(*stub) == head);
  CHECK(ProcessCount(*stub) == 0);
  CHECK_THAT(daemon.LogTail(20000),
             Catch::Contains("(spawning is disabled: no [spawn] allow list)"));
  CHECK_THAT(daemon.LogTail(20000),
             Catch::Contains(
                 fmt::format("for uid {} (pid {}) on the unix socket", ::geteuid(), ::getpid())));
}

TEST_CASE("a forwarded spawn is checked by the daemon that would run the program",
          "[integration][spawn][security][cluster]") {
  // The seed spawns nothing itself; the joiner allows the test programs.
  DaemonOptions seed_options = LoopbackClusterMember("seed");
  seed_options.seed = true;
  seed_options.spawn_allow.clear();
  Daemon seed(seed_options);
  REQUIRE_OK(seed.Start());
  DaemonOptions joiner_options = LoopbackClusterMember("worker-node");
  joiner_options.join = {REQUIRE_VALUE(seed.tcp_address())};
  Daemon joiner(joiner_options);
  REQUIRE_OK(joiner.Start());
  auto stub = NewRawStub(seed.address());
  const Gid remote = WaitForHost(*stub, "kind=host and name=worker-node");
  REQUIRE(remote.valid());

  CHECK_REFUSED(RawSpawn(*stub, SpawnRequest(kChild)), "spawn is disabled on h1");

  pb::SpawnProcessRequest allowed = SpawnRequest(kChild, {"--then", "wait"});
  allowed.set_host(remote.raw());
  pb::SpawnProcessResponse spawned;
  const grpc::Status started = RawSpawn(*stub, allowed, &spawned);
  INFO(Describe(started));
  REQUIRE(started.ok());
  CHECK(Gid::FromRaw(spawned.gid()).host() == remote);

  pb::SpawnProcessRequest refused = SpawnRequest("/usr/bin/true");
  refused.set_host(remote.raw());
  CHECK_REFUSED(RawSpawn(*stub, refused), "on " + remote.ToString() + ": " + remote.ToString() +
                                              " does not allow spawning /usr/bin/true");
  // The seed forwarded it for its own caller, whose uid the joiner names.
  CHECK_THAT(joiner.LogTail(20000),
             Catch::Contains(fmt::format(
                 "refused to spawn /usr/bin/true for uid {} of another host (ipv", ::geteuid())));
  CHECK_THAT(joiner.LogTail(20000), Catch::Contains(", forwarded by h1)"));

  CHECK(RawKill(*stub, Gid::FromRaw(spawned.gid()), SIGKILL).ok());
}

TEST_CASE("with run_as a spawned program runs as that user and group and enrolls",
          "[integration][spawn][security]") {
  if (!CanSwitchUsers()) {
    WARN("skipped: switching users needs root");
    return;
  }
  DaemonOptions options;
  options.extra_args = {"--spawn-run-as", "nobody", "--socket-group", "nogroup"};
  Daemon daemon(options);
  REQUIRE_OK(daemon.Start());
  CHECK_THAT(daemon.LogTail(), Catch::Contains("spawned programs run as nobody (uid 65534"));
  auto stub = NewRawStub(daemon.address());

  pb::SpawnProcessResponse spawned;
  const grpc::Status started =
      RawSpawn(*stub, SpawnRequest(kChild, {"--say", "as nobody", "--then", "wait"}), &spawned);
  INFO(Describe(started));
  REQUIRE(started.ok());
  const Gid gid = Gid::FromRaw(spawned.gid());
  const pid_t pid = static_cast<pid_t>(spawned.os_pid());
  CHECK(ProcStatusField(pid, "Uid") == "65534 65534 65534 65534");
  CHECK(ProcStatusField(pid, "Gid") == "65534 65534 65534 65534");
  CHECK(ProcStatusField(pid, "Groups") == "65534");
  // It enrolled (the spawn answered) with the daemon's recorded pid, and
  // wrote to the log files the daemon opened for it.
  pb::Entity entity;
  REQUIRE(RawLookup(*stub, gid.raw(), &entity).ok());
  CHECK(entity.state() == pb::RUNNING);
  CHECK(entity.os_pid() == pid);
  std::string out;
  CHECK(WaitUntil(
      [&] {
        std::ifstream file(spawned.stdout_path());
        out.assign(std::istreambuf_iterator<char>(file), {});
        return out.find("as nobody\n") != std::string::npos;
      },
      seconds(10)));
  CHECK_THAT(out, Catch::Contains("gid " + gid.ToString() + "\n"));
  CHECK_THAT(daemon.LogTail(20000), Catch::Contains("as user nobody"));
  CHECK(RawKill(*stub, gid, SIGKILL).ok());
}

TEST_CASE("with run_as a program the user cannot execute is refused after the switch",
          "[integration][spawn][security]") {
  if (!CanSwitchUsers()) {
    WARN("skipped: switching users needs root");
    return;
  }
  // mkdtemp makes it 0700 root: nobody cannot reach the script in it.
  TempDir hidden("toclsd-hidden-");
  WriteScript(hidden.File("program"));
  DaemonOptions options;
  options.spawn_allow.push_back(hidden.path() + "/*");
  options.extra_args = {"--spawn-run-as", "nobody", "--socket-group", "nogroup"};
  Daemon daemon(options);
  REQUIRE_OK(daemon.Start());
  auto stub = NewRawStub(daemon.address());

  pb::SpawnProcessRequest request = SpawnRequest(hidden.File("program"));
  request.set_name("hidden");
  CHECK_REFUSED(RawSpawn(*stub, request), hidden.File("program") + " is not executable");
  pb::QueryResponse rows;
  REQUIRE(RawQuery(*stub, "kind=process and name=hidden", {}, &rows).ok());
  REQUIRE(rows.entities_size() == 1);
  CHECK(rows.entities(0).state() == pb::EXITED);
  CHECK_THAT(rows.entities(0).exit_reason(), Catch::StartsWith("could not be started: "));
}

TEST_CASE("run_as without a socket group its user is in is refused at start",
          "[integration][spawn][security]") {
  if (!CanSwitchUsers()) {
    WARN("skipped: run_as applies to a daemon running as root");
    return;
  }
  {
    DaemonOptions options;
    options.extra_args = {"--spawn-run-as", "nobody"};
    Daemon daemon(options);
    const Status started = daemon.Start();
    CHECK(started.code() == StatusCode::kUnavailable);
    CHECK_THAT(started.message(), Catch::Contains("spawn run_as 'nobody' needs socket_group"));
  }
  {
    DaemonOptions options;
    options.extra_args = {"--spawn-run-as", "nobody", "--socket-group", "root"};
    Daemon daemon(options);
    const Status started = daemon.Start();
    CHECK_THAT(started.message(),
               Catch::Contains("spawn run_as 'nobody' is not in socket_group 'root'"));
  }
  {
    DaemonOptions options;
    options.extra_args = {"--spawn-run-as", "tocl-no-such-user"};
    Daemon daemon(options);
    CHECK_THAT(daemon.Start().message(),
               Catch::Contains("spawn run_as: no user 'tocl-no-such-user' on this host"));
  }
}

}  // namespace
}  // namespace tocl::testing
