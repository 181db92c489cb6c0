// The daemon acts only on identities it verified (issue #16): an enrolling
// process is the pid the kernel names for its connection (SO_PEERCRED), a
// spawned child is the pid the daemon started, signals go through pidfds
// to verified processes only, and a caller signals its own uid's processes
// (root and admin_group any). The callers are tocl-identity-probe processes
// run as other users: the tests that switch users need root and skip
// without it.
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "daemon_harness.h"
#include "raw_directory.h"
#include "status_assertions.h"
#include "tocl/runtime.h"
#include "unprivileged.h"

namespace tocl::testing {
namespace {

using std::chrono::seconds;

const std::string kProbe = TOCL_IDENTITY_PROBE_PATH;
const std::string kChild = TOCL_SPAWNED_CHILD_PATH;
// A user who is not nobody but in nogroup too: another uid of socket_group.
constexpr uid_t kOtherUid = 65533;
const std::string kNobody = fmt::format("{}:{}", kNobodyUid, kNogroupGid);
const std::string kOther = fmt::format("{}:{}", kOtherUid, kNogroupGid);
// grpc::StatusCode values as the probe prints them.
const std::string kPermissionDenied = "refused 7: ";
const std::string kFailedPrecondition = "refused 9: ";
const std::string kNotFound = "refused 5: ";

// The probe's command line: `as` "" runs it as the test's own user.
std::vector<std::string> ProbeCommand(const std::string& address, const std::string& as,
                                      std::vector<std::string> call) {
  std::vector<std::string> argv = {kProbe, "--daemon", address};
  if (!as.empty()) argv.insert(argv.end(), {"--as", as});
  argv.insert(argv.end(), call.begin(), call.end());
  return argv;
}

ProgramResult RunProbe(const std::string& address, const std::string& as,
                       std::vector<std::string> call) {
  return REQUIRE_VALUE(RunProgram(ProbeCommand(address, as, std::move(call)), seconds(30)));
}

// A probe holding an enrollment open (until stdin closes or a signal).
struct HeldProcess {
  ChildProcess process;
  Gid gid;
};

// `command` runs a probe that enrolls and holds (it may wrap the probe).
HeldProcess HoldEnrollment(std::vector<std::string> command) {
  SpawnOptions options;
  options.pipe_stdin = true;
  auto process = REQUIRE_VALUE(ChildProcess::Spawn(std::move(command), options));
  Gid gid;
  const bool enrolled = WaitUntil(
      [&] {
        auto parsed = WorkerGid(process.Output());
        if (parsed.ok()) gid = *parsed;
        return parsed.ok() || process.Exited();
      },
      seconds(20));
  INFO(process.Output());
  REQUIRE(enrolled);
  REQUIRE(gid.valid());
  return HeldProcess{std::move(process), gid};
}

HeldProcess HoldEnrollment(const Daemon& daemon, const std::string& as) {
  return HoldEnrollment(ProbeCommand(daemon.address(), as, {"enroll", "--hold"}));
}

// How a process ended once it has, or -1 after 10 s.
int EndOf(ChildProcess& process) {
  Result<int> status = process.Wait(seconds(10));
  return status.ok() ? *status : -1;
}

// The daemon's log has `text` (within 10 s: it is written after the reply).
bool Logged(const Daemon& daemon, const std::string& text) {
  return WaitUntil([&] { return daemon.LogTail(40000).find(text) != std::string::npos; },
                   seconds(10));
}

// Has the daemon spawn the probe's child for `as` (uid:gid); the child's Gid.
Result<Gid> SpawnChildFor(const Daemon& daemon, const std::string& as) {
  ProgramResult spawned = RunProbe(daemon.address(), as, {"spawn", kChild});
  if (spawned.exit_code != 0) return Internal("spawn for " + as + " failed: " + spawned.output);
  return WorkerGid(spawned.output);
}

// Waits until the directory shows `gid` exited (its row in `entity`).
bool WaitExited(pb::Directory::Stub& stub, Gid gid, pb::Entity* entity) {
  return WaitUntil(
      [&] { return RawLookup(stub, gid.raw(), entity).ok() && entity->state() == pb::EXITED; },
      seconds(10));
}

DaemonOptions WithGroups(std::vector<std::string> extra_args) {
  DaemonOptions options;
  options.extra_args = std::move(extra_args);
  return options;
}

TEST_CASE("an enrollment whose os_pid is not the caller's pid is refused, and so is one without",
          "[integration][security][identity]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto stub = NewRawStub(daemon.address());
  auto victim = REQUIRE_VALUE(ChildProcess::Spawn({"/bin/sleep", "60"}));

  const grpc::Status claimed = RawEnroll(*stub, MakeRegister("impostor", {}, victim.pid())).status;
  INFO(Describe(claimed));
  CHECK(claimed.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK_THAT(claimed.error_message(),
             Catch::Contains(fmt::format("os_pid {} is not the enrolling process: the kernel says "
                                         "this connection is pid {}",
                                         victim.pid(), ::getpid())));
  pb::EnrollRegister without = MakeRegister("no-pid");
  without.clear_os_pid();
  const grpc::Status missing = RawEnroll(*stub, without).status;
  INFO(Describe(missing));
  CHECK(missing.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(missing.error_message(), Catch::Contains("os_pid 0 is not a process id"));

  // Nothing was written, and the process whose pid was claimed runs on.
  pb::QueryResponse found;
  REQUIRE(RawQuery(*stub, fmt::format("pid={}", victim.pid()), {}, &found).ok());
  CHECK(found.entities_size() == 0);
  CHECK(victim.running());
  // Its own pid enrolls.
  CHECK(RawEnroll(*stub, MakeRegister("honest")).status.ok());
}

// The last field of the `key` line of /proc/<pid>/status ("" without it).
std::string LastStatusField(pid_t pid, const std::string& key) {
  std::ifstream status(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(status, line)) {
    if (!line.starts_with(key + ":")) continue;
    const size_t last = line.find_last_of(" \t");
    return last == std::string::npos ? "" : line.substr(last + 1);
  }
  return "";
}

const std::string kUnshare = "/usr/bin/unshare";

TEST_CASE(
    "a process in another pid namespace enrolls with its pid there, and the directory has the "
    "kernel's",
    "[integration][security][identity]") {
  if (!CanSwitchUsers() || ::access(kUnshare.c_str(), X_OK) != 0) {
    WARN("skipped: a new pid namespace needs root and " << kUnshare);
    return;
  }
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  // The probe is pid 1 of a new pid namespace (unshare forks it), and
  // claims getpid(): 1.
  auto [unshare, gid] = HoldEnrollment({kUnshare, "--pid", "--kill-child", kProbe, "--daemon",
                                        daemon.address(), "enroll", "--hold"});

  // Recorded as the daemon's namespace knows it: the probe, unshare's child,
  // which is pid 1 in its own.
  auto stub = NewRawStub(daemon.address());
  pb::Entity entity;
  REQUIRE(RawLookup(*stub, gid.raw(), &entity).ok());
  const pid_t pid = static_cast<pid_t>(entity.os_pid());
  CHECK(pid != 1);
  CHECK(LastStatusField(pid, "PPid") == std::to_string(unshare.pid()));
  CHECK(LastStatusField(pid, "NSpid") == "1");
  CHECK(Logged(daemon, fmt::format("(pid {}, 1 in its pid namespace) enrolled", pid)));

  // Another pid claimed from in there is still refused, and told why.
  ProgramResult wrong =
      REQUIRE_VALUE(RunProgram({kUnshare, "--pid", "--kill-child", kProbe, "--daemon",
                                daemon.address(), "enroll", "--os-pid", "2"},
                               seconds(30)));
  INFO(wrong.output);
  CHECK(wrong.exit_code == 1);
  CHECK_THAT(wrong.output, Catch::Contains(kPermissionDenied + "os_pid 2 is not the enrolling "
                                                               "process") &&
                               Catch::Contains(", pid 1 in its own pid namespace"));

  // Signalled through the pidfd of the verified process (SIGKILL: the init
  // of a pid namespace ignores what it does not handle).
  CHECK(RawKill(*stub, gid, SIGKILL).ok());
  CHECK(WaitExited(*stub, gid, &entity));
  CHECK(EndOf(unshare) != -1);
}

TEST_CASE(
    "a socket_group member cannot have the root daemon signal a root process, by its pid "
    "or by its Gid",
    "[integration][security][identity]") {
  if (!CanSwitchUsers()) {
    WARN("skipped: switching users needs root");
    return;
  }
  // Spawning disabled, as in the attack that was measured.
  DaemonOptions options = WithGroups({"--socket-group", "nogroup"});
  options.spawn_allow.clear();
  Daemon daemon(options);
  REQUIRE_OK(daemon.Start());
  auto sleeper = REQUIRE_VALUE(ChildProcess::Spawn({"/bin/sleep", "60"}));
  HeldProcess root_process = HoldEnrollment(daemon, "");

  // The attack: enroll claiming the root process's pid, then kill that Gid.
  ProgramResult claimed =
      RunProbe(daemon.address(), kNobody, {"enroll", "--os-pid", std::to_string(sleeper.pid())});
  INFO(claimed.output);
  CHECK(claimed.exit_code == 1);
  CHECK_THAT(claimed.output,
             Catch::Contains(kPermissionDenied +
                             fmt::format("os_pid {} is not the enrolling process", sleeper.pid())));
  // Nor by the Gid of a root process that enrolled itself.
  ProgramResult killed =
      RunProbe(daemon.address(), kNobody, {"kill", root_process.gid.ToString(), "--signal", "9"});
  INFO(killed.output);
  CHECK(killed.exit_code == 1);
  CHECK_THAT(killed.output, Catch::Contains(kPermissionDenied + "uid 65534 (pid ") &&
                                Catch::Contains(fmt::format(
                                    "on the unix socket may not signal {}, a process of uid 0",
                                    root_process.gid.ToString())));
  CHECK(Logged(daemon, "kill of " + root_process.gid.ToString() + " refused"));

  // Both live.
  CHECK(sleeper.running());
  CHECK(root_process.process.running());
  auto stub = NewRawStub(daemon.address());
  pb::Entity entity;
  REQUIRE(RawLookup(*stub, root_process.gid.raw(), &entity).ok());
  CHECK(entity.state() == pb::RUNNING);
}

TEST_CASE("a caller signals the processes of its own uid, root signals any, another uid none",
          "[integration][security][identity]") {
  if (!CanSwitchUsers()) {
    WARN("skipped: switching users needs root");
    return;
  }
  Daemon daemon(WithGroups({"--socket-group", "nogroup"}));
  REQUIRE_OK(daemon.Start());
  HeldProcess first = HoldEnrollment(daemon, kNobody);
  HeldProcess second = HoldEnrollment(daemon, kNobody);
  HeldProcess root_process = HoldEnrollment(daemon, "");

  // Same uid: signalled (through the daemon's pidfd of it).
  ProgramResult own = RunProbe(daemon.address(), kNobody, {"kill", first.gid.ToString()});
  INFO(own.output);
  CHECK(own.exit_code == 0);
  CHECK(EndOf(first.process) == 128 + SIGTERM);

  // Another uid of the same socket group: refused, whoever asks.
  ProgramResult other = RunProbe(daemon.address(), kOther, {"kill", second.gid.ToString()});
  INFO(other.output);
  CHECK(other.exit_code == 1);
  CHECK_THAT(other.output, Catch::Contains(kPermissionDenied + "uid 65533 (pid ") &&
                               Catch::Contains("a process of uid 65534"));
  ProgramResult up = RunProbe(daemon.address(), kNobody, {"kill", root_process.gid.ToString()});
  INFO(up.output);
  CHECK(up.exit_code == 1);
  CHECK(second.process.running());
  CHECK(root_process.process.running());

  // Root: any.
  auto stub = NewRawStub(daemon.address());
  CHECK(RawKill(*stub, second.gid, SIGTERM).ok());
  CHECK(EndOf(second.process) == 128 + SIGTERM);
  CHECK(RawKill(*stub, root_process.gid, SIGTERM).ok());
  CHECK(EndOf(root_process.process) == 128 + SIGTERM);
}

TEST_CASE("members of admin_group signal every process of the host",
          "[integration][security][identity]") {
  if (!CanSwitchUsers()) {
    WARN("skipped: switching users needs root");
    return;
  }
  Daemon daemon(WithGroups({"--socket-group", "nogroup", "--admin-group", "nogroup"}));
  REQUIRE_OK(daemon.Start());
  HeldProcess root_process = HoldEnrollment(daemon, "");
  ProgramResult killed = RunProbe(daemon.address(), kOther, {"kill", root_process.gid.ToString()});
  INFO(killed.output);
  CHECK(killed.exit_code == 0);
  CHECK(EndOf(root_process.process) == 128 + SIGTERM);
}

// Makes the next process this machine starts get `pid` (root: the pid
// namespace's ns_last_pid), and starts a sleeper; nullopt when other
// processes kept taking the pid first.
std::optional<ChildProcess> SleeperWithPid(pid_t pid) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    {
      std::ofstream last("/proc/sys/kernel/ns_last_pid");
      last << pid - 1;
      if (!last.flush()) return std::nullopt;
    }
    auto sleeper = ChildProcess::Spawn({"/bin/sleep", "60"});
    if (sleeper.ok() && sleeper->pid() == pid) return std::move(*sleeper);
  }
  return std::nullopt;
}

TEST_CASE("a process that exited is never signalled, even when another process has its pid",
          "[integration][security][identity]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto stub = NewRawStub(daemon.address());
  HeldProcess verified = HoldEnrollment(daemon, "");
  const pid_t pid = verified.process.pid();
  REQUIRE_VALUE(verified.process.Kill());  // SIGKILL and reaped: its pid is free

  std::optional<ChildProcess> reuser;
  if (CanSwitchUsers()) reuser = SleeperWithPid(pid);
  if (!reuser) WARN("pid " << pid << " could not be given to another process; checking without");
  const grpc::Status killed = RawKill(*stub, verified.gid, SIGKILL);
  INFO(Describe(killed));
  CHECK(killed.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  // Its session ended with it: "has exited" (from the pidfd or the row).
  CHECK_THAT(killed.error_message(), Catch::Contains("has exited"));
  if (reuser) CHECK(reuser->running());
}

// The bytes of a hex string (the spawn token in a child's environment).
std::string FromHex(const std::string& hex) {
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return bytes;
}

TEST_CASE("a spawned program's identity is refused to every pid but the one the daemon started",
          "[integration][security][identity]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto stub = NewRawStub(daemon.address());
  pb::SpawnProcessResponse spawned;
  const grpc::Status started = RawSpawn(*stub, SpawnRequest(kChild, {"--then", "wait"}), &spawned);
  INFO(Describe(started));
  REQUIRE(started.ok());
  const Gid gid = Gid::FromRaw(spawned.gid());
  const pid_t pid = static_cast<pid_t>(spawned.os_pid());
  const std::string token = FromHex(EnvironmentOf(pid, "TOCL_SPAWN_TOKEN"));
  REQUIRE(token.size() == 16);

  // The right Gid and token, from this process (its own pid, verified).
  pb::EnrollRegister resume = MakeRegister("thief");
  resume.set_resume_gid(gid.raw());
  resume.set_resume_token(token);
  const grpc::Status stolen = RawEnroll(*stub, resume).status;
  INFO(Describe(stolen));
  CHECK(stolen.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK_THAT(stolen.error_message(),
             Catch::Contains(fmt::format("{} is the process this daemon started as pid {}; pid {} "
                                         "may not take its identity",
                                         gid.ToString(), pid, ::getpid())));
  // Claiming the child's pid as well.
  resume.set_os_pid(pid);
  const grpc::Status claimed = RawEnroll(*stub, resume).status;
  INFO(Describe(claimed));
  CHECK(claimed.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK_THAT(claimed.error_message(), Catch::Contains("is not the enrolling process"));

  pb::Entity entity;
  REQUIRE(RawLookup(*stub, gid.raw(), &entity).ok());
  CHECK(entity.state() == pb::RUNNING);
  CHECK(entity.os_pid() == pid);
  CHECK(RawKill(*stub, gid, SIGKILL).ok());
}

TEST_CASE("logs are read and spawned processes signalled by whoever had them spawned",
          "[integration][security][identity]") {
  if (!CanSwitchUsers()) {
    WARN("skipped: switching users needs root");
    return;
  }
  Daemon daemon(WithGroups({"--socket-group", "nogroup"}));
  REQUIRE_OK(daemon.Start());
  // Without run_as the program runs as root, spawned for nobody.
  const Gid gid = REQUIRE_VALUE(SpawnChildFor(daemon, kNobody));

  ProgramResult read = RunProbe(daemon.address(), kNobody, {"log", gid.ToString()});
  INFO(read.output);
  CHECK(read.exit_code == 0);
  ProgramResult other_read = RunProbe(daemon.address(), kOther, {"log", gid.ToString()});
  INFO(other_read.output);
  CHECK(other_read.exit_code == 1);
  CHECK_THAT(other_read.output, Catch::Contains(kPermissionDenied + "uid 65533 (pid ") &&
                                    Catch::Contains("may not read the logs of " + gid.ToString() +
                                                    ", spawned for uid 65534"));
  ProgramResult other_kill = RunProbe(daemon.address(), kOther, {"kill", gid.ToString()});
  INFO(other_kill.output);
  CHECK(other_kill.exit_code == 1);
  CHECK_THAT(other_kill.output, Catch::Contains("spawned for uid 65534"));

  ProgramResult own_kill = RunProbe(daemon.address(), kNobody, {"kill", gid.ToString()});
  INFO(own_kill.output);
  CHECK(own_kill.exit_code == 0);
  auto stub = NewRawStub(daemon.address());
  pb::Entity entity;
  CHECK(WaitExited(*stub, gid, &entity));
  CHECK(entity.exit_signal() == SIGTERM);
}

TEST_CASE("a log whose owner is unknown is read by an administrator only",
          "[integration][security][identity]") {
  if (!CanSwitchUsers()) {
    WARN("skipped: switching users needs root");
    return;
  }
  Daemon daemon(WithGroups({"--socket-group", "nogroup"}));
  REQUIRE_OK(daemon.Start());
  const Gid gid = REQUIRE_VALUE(SpawnChildFor(daemon, kNobody));
  auto stub = NewRawStub(daemon.address());
  REQUIRE(RawKill(*stub, gid, SIGTERM).ok());  // it waits for a signal
  pb::Entity entity;
  REQUIRE(WaitExited(*stub, gid, &entity));

  // The stdout log, whose owner is the one the daemon knows once the child
  // is reaped, is gone; its stderr log is left.
  const std::string logs = daemon.state_dir() + "/logs/" + gid.ToString();
  REQUIRE(::unlink((logs + ".out").c_str()) == 0);
  REQUIRE(::access((logs + ".err").c_str(), F_OK) == 0);

  // Until the daemon has let go of its child it knows the owner from it.
  ProgramResult other;
  REQUIRE(WaitUntil(
      [&] {
        other = RunProbe(daemon.address(), kOther, {"log", gid.ToString(), "--stderr"});
        return other.output.find(kPermissionDenied) == std::string::npos;
      },
      seconds(10)));
  INFO(other.output);
  CHECK(other.exit_code == 1);
  CHECK_THAT(other.output, Catch::Contains(kNotFound + gid.ToString() + " has no logs that uid " +
                                           std::to_string(kOtherUid)));
  // Nor the uid it was spawned for: without the owner nobody is known.
  ProgramResult own = RunProbe(daemon.address(), kNobody, {"log", gid.ToString(), "--stderr"});
  INFO(own.output);
  CHECK(own.exit_code == 1);
  CHECK_THAT(own.output, Catch::Contains(kNotFound));
  // Root is an administrator: read.
  pb::ReadLogRequest request;
  request.set_process(gid.raw());
  request.set_stream(pb::LOG_STREAM_STDERR);
  pb::ReadLogResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(10));
  const grpc::Status read = stub->ReadLog(&context, request, &response);
  INFO(Describe(read));
  CHECK(read.ok());
}

TEST_CASE("reserved thread ids are refused by RegisterThreads",
          "[integration][security][identity]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto stub = NewRawStub(daemon.address());
  EnrollAttempt enrolled = RawEnroll(*stub, MakeRegister("reserver"));
  REQUIRE(enrolled.status.ok());
  const Gid process = enrolled.enrollment->gid();
  const uint32_t first_reserved = Gid::kMaxThread + 1 - kInternalThreads;

  for (uint32_t index : {Gid::kMaxThread, first_reserved}) {
    const Gid thread = Gid::Thread(process.host_index(), process.process_index(), index);
    const grpc::Status refused = RawRegisterThreads(
        *stub, enrolled.enrollment->ThreadsRequest({MakeThread(thread, "reserved")}));
    INFO(Describe(refused));
    CHECK(refused.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(refused.error_message(), Catch::Contains(thread.ToString() + " is reserved"));
    CHECK(RawLookup(*stub, thread.raw()).error_code() == grpc::StatusCode::NOT_FOUND);
  }
  // The last one before them is an ordinary thread.
  const Gid last = Gid::Thread(process.host_index(), process.process_index(), first_reserved - 1);
  CHECK(RawRegisterThreads(*stub, enrolled.enrollment->ThreadsRequest({MakeThread(last, "last")}))
            .ok());

  // Through the client library too: the daemon is what refuses.
  auto client = REQUIRE_VALUE(daemon.Connect());
  auto session = REQUIRE_VALUE(client->Enroll(ProcessNamed("library")));
  const ThreadInfo reserved{.gid = Gid::Thread(session->gid().host_index(),
                                               session->gid().process_index(), Gid::kMaxThread),
                            .name = "service",
                            .attributes = {}};
  const Status status = session->RegisterThreads(std::span(&reserved, 1));
  CHECK(status.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(status.message(), Catch::Contains("is reserved"));
}

TEST_CASE("over TCP without credentials only toclsd's own user and root spawn, kill and read logs",
          "[integration][security][identity]") {
  DaemonOptions options;
  options.listen = "127.0.0.1:0";
  Daemon daemon(options);
  REQUIRE_OK(daemon.Start());
  const std::string tcp = REQUIRE_VALUE(daemon.tcp_address());

  // Root over loopback TCP is known by the kernel's socket table: served.
  auto remote = NewRawStub(tcp);
  const grpc::Status root_kill = RawKill(*remote, Gid::Process(1, 999), SIGTERM);
  INFO(Describe(root_kill));
  CHECK(root_kill.error_code() == grpc::StatusCode::NOT_FOUND);

  if (!CanSwitchUsers()) {
    WARN("skipped the other user: switching users needs root");
    return;
  }
  // Another user passes no socket permissions on TCP: refused, and told why.
  for (std::vector<std::string> call :
       {std::vector<std::string>{"kill", "h1.p1"}, std::vector<std::string>{"log", "h1.p1"},
        std::vector<std::string>{"spawn", kChild}}) {
    ProgramResult refused = RunProbe(tcp, kNobody, call);
    INFO(refused.output);
    CHECK(refused.exit_code == 1);
    CHECK_THAT(refused.output,
               Catch::Contains(kPermissionDenied) &&
                   Catch::Contains(fmt::format("over TCP without credentials only toclsd's own "
                                               "user (uid {}) and root are served",
                                               ::geteuid())) &&
                   Catch::Contains("is uid 65534: use the unix socket"));
  }
  auto stub = NewRawStub(daemon.address());
  pb::QueryResponse processes;
  REQUIRE(RawQuery(*stub, "kind=process", {}, &processes).ok());
  CHECK(processes.entities_size() == 0);
}

}  // namespace
}  // namespace tocl::testing
