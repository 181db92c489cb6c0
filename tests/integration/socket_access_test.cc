// Who can reach a daemon through its unix socket (toclsd/socket_access.h):
// the socket is 0600 in a 0700 state directory, so another user cannot
// connect; with socket_group it is 0660 in a 0710 directory of that group,
// whose members can; the database stays 0600; and a socket put where others
// could replace it is refused. The user switches need root: those tests
// skip without it.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <string>
#include <vector>

#include "daemon_harness.h"
#include "status_assertions.h"
#include "unprivileged.h"

namespace tocl::testing {
namespace {

using std::chrono::seconds;

struct stat StatOf(const std::string& path) {
  struct stat info {};
  INFO(path);
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return info;
}

mode_t ModeOf(const std::string& path) {
  return StatOf(path).st_mode & 07777;
}

// The daemon's command line with --socket at `socket`.
std::vector<std::string> WithSocket(const Daemon& daemon, const std::string& socket) {
  std::vector<std::string> argv = daemon.CommandLine();
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == "--socket") argv[i + 1] = socket;
  }
  return argv;
}

TEST_CASE("the socket is 0600 in a 0700 state directory and other users cannot connect",
          "[integration][security]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  const struct stat socket = StatOf(daemon.socket_path());
  CHECK(S_ISSOCK(socket.st_mode));
  CHECK((socket.st_mode & 07777) == 0600);
  CHECK(ModeOf(daemon.state_dir()) == 0700);
  // It holds every process's session token.
  CHECK(ModeOf(daemon.db_path()) == 0600);
  CHECK_OK(REQUIRE_VALUE(daemon.Connect())->Ping());

  if (!CanSwitchUsers()) {
    WARN("skipped the connect as nobody: switching users needs root");
    return;
  }
  CHECK(ConnectAsNobody(daemon.socket_path()) == EACCES);
}

TEST_CASE("with socket_group the group's members can connect, and still cannot read the database",
          "[integration][security]") {
  if (!CanSwitchUsers()) {
    WARN("skipped: switching users needs root");
    return;
  }
  DaemonOptions options;
  options.extra_args = {"--socket-group", "nogroup"};
  Daemon daemon(options);
  REQUIRE_OK(daemon.Start());
  const struct stat socket = StatOf(daemon.socket_path());
  CHECK((socket.st_mode & 07777) == 0660);
  CHECK(socket.st_gid == kNogroupGid);
  const struct stat dir = StatOf(daemon.state_dir());
  CHECK((dir.st_mode & 07777) == 0710);
  CHECK(dir.st_gid == kNogroupGid);

  CHECK(ConnectAsNobody(daemon.socket_path()) == 0);
  // The group passes through the directory but reads nothing in it.
  const std::string db = daemon.db_path();
  CHECK(RunAsNobody([&db] {
          const int fd = ::open(db.c_str(), O_RDONLY | O_CLOEXEC);
          if (fd >= 0) {
            ::close(fd);
            return 0;
          }
          return errno;
        }) == EACCES);
  const std::string dir_path = daemon.state_dir();
  CHECK(RunAsNobody([&dir_path] {
          const int fd = ::open(dir_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
          if (fd >= 0) {
            ::close(fd);
            return 0;
          }
          return errno;
        }) == EACCES);
}

TEST_CASE("a socket in a directory others can write to or own is refused",
          "[integration][security]") {
  Daemon daemon;  // not started: only its command line is used
  TempDir shared("toclsd-shared-");
  REQUIRE(::chmod(shared.path().c_str(), 01777) == 0);
  auto refused = REQUIRE_VALUE(RunProgram(WithSocket(daemon, shared.File("x.sock")), seconds(20)));
  INFO(refused.output);
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.output, Catch::Contains("the socket's directory " + shared.path() +
                                             " can be written by other users (mode 1777)"));
  CHECK(::access(shared.File("x.sock").c_str(), F_OK) != 0);

  if (!CanSwitchUsers()) {
    WARN("skipped the directory of another user: chown needs root");
    return;
  }
  TempDir foreign("toclsd-foreign-");
  REQUIRE(::chown(foreign.path().c_str(), kNobodyUid, kNogroupGid) == 0);
  refused = REQUIRE_VALUE(RunProgram(WithSocket(daemon, foreign.File("x.sock")), seconds(20)));
  INFO(refused.output);
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.output,
             Catch::Contains("the socket's directory " + foreign.path() + " belongs to uid 65534"));
}

TEST_CASE("a socket in another private directory is served 0600 and the directory is left as it is",
          "[integration][security]") {
  Daemon daemon;  // not started: its state directory and command line are used
  TempDir elsewhere("toclsd-elsewhere-");
  REQUIRE(::chmod(elsewhere.path().c_str(), 0755) == 0);
  const std::string socket = elsewhere.File("toclsd.sock");
  SpawnOptions spawn;
  spawn.output_path = daemon.log_path();
  auto process = REQUIRE_VALUE(ChildProcess::Spawn(WithSocket(daemon, socket), spawn));
  const bool ready = WaitUntil(
      [&] {
        if (process.Exited()) return true;
        auto client = DirectoryClient::Connect("unix:" + socket, std::chrono::milliseconds(200));
        return client.ok() && (*client)->Ping().ok();
      },
      seconds(10));
  INFO(daemon.LogTail());
  REQUIRE(ready);
  REQUIRE_FALSE(process.Exited());
  CHECK(ModeOf(socket) == 0600);
  CHECK(ModeOf(elsewhere.path()) == 0755);
  REQUIRE_OK(process.Signal(SIGTERM));
  CHECK(REQUIRE_VALUE(process.Wait(seconds(10))) == 0);
}

}  // namespace
}  // namespace tocl::testing
