// A program that uses the library, with its stdout piped: tocl's log lines
// go to its stderr, at warn unless TOCL_LOG_LEVEL says otherwise, and its
// stdout carries only what the program prints itself.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "daemon_harness.h"
#include "messaging_support.h"
#include "status_assertions.h"

namespace tocl::testing {
namespace {

using std::chrono::seconds;

struct Streams {
  std::string out;
  std::string err;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs tocl-msg-worker (role idle: starts a runtime, enrolls a thread,
// prints its "process", "thread" and "ready" lines) with `env` added, until
// it is ready, then lets it finish. Its stderr goes to a file of its own.
Streams RunWorker(const Daemon& daemon, const std::string& name, std::vector<std::string> env) {
  TempDir dir("tocl-logging-");
  const std::string err_path = dir.path() + "/stderr";
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>\"$TOCL_TEST_STDERR\""};
  for (std::string& arg :
       MsgWorkerCommand(daemon.address(), MsgWorkerArgs("idle", name).Subsystems("shm"))) {
    argv.push_back(std::move(arg));
  }
  env.push_back("TOCL_TEST_STDERR=" + err_path);
  SpawnOptions spawn;
  spawn.pipe_stdin = true;
  spawn.env = std::move(env);
  auto child = REQUIRE_VALUE(ChildProcess::Spawn(argv, spawn));
  const bool ready = WaitUntil(
      [&] { return child.Output().find("\nready\n") != std::string::npos || !child.running(); },
      seconds(30));
  INFO("stdout: " << child.Output() << "\nstderr: " << ReadFile(err_path));
  REQUIRE(ready);
  child.CloseStdin();
  CHECK(REQUIRE_VALUE(child.Wait(seconds(30))) == 0);
  return Streams{child.Output(), ReadFile(err_path)};
}

// Every line of stdout is one the worker prints itself.
void CheckOnlyWorkerLines(const std::string& out) {
  std::istringstream lines(out);
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    INFO("stdout line: " << line);
    CHECK((line.starts_with("process h") || line.starts_with("thread h") || line == "ready" ||
           line.starts_with("progress ") || line.starts_with("done") ||
           line.starts_with("stopping t=") || line == "exiting"));
    ++count;
  }
  CHECK(count >= 3);
}

TEST_CASE("a program's stdout holds nothing of tocl's logs, which go to stderr at warn",
          "[integration][log]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  // A program that inherited a spawned process's identity (TOCL_PROCESS_GID
  // of a running process, with a token that is not its own) enrolls as a
  // process of its own and says so at info level.
  auto holder = REQUIRE_VALUE(client->Enroll(ProcessNamed("holder")));
  const std::vector<std::string> inherited = {"TOCL_PROCESS_GID=" + holder->gid().ToString(),
                                              "TOCL_SPAWN_TOKEN=00"};
  const std::string info_line = "not enrolling as " + holder->gid().ToString();

  SECTION("at the default level the info line is not written at all") {
    std::vector<std::string> env = inherited;
    env.push_back("TOCL_LOG_LEVEL=");
    const Streams streams = RunWorker(daemon, "quiet", env);
    INFO("stdout: " << streams.out << "\nstderr: " << streams.err);
    CheckOnlyWorkerLines(streams.out);
    CHECK(streams.err.find(info_line) == std::string::npos);
  }
  SECTION("TOCL_LOG_LEVEL=info writes it, to stderr") {
    std::vector<std::string> env = inherited;
    env.push_back("TOCL_LOG_LEVEL=info");
    const Streams streams = RunWorker(daemon, "told", env);
    INFO("stdout: " << streams.out << "\nstderr: " << streams.err);
    CheckOnlyWorkerLines(streams.out);
    CHECK(streams.err.find(info_line) != std::string::npos);
    CHECK(streams.err.find("[info]") != std::string::npos);
  }
  SECTION("a warning (a TOCL_LOG_LEVEL that is not a level) goes to stderr") {
    const Streams streams = RunWorker(daemon, "warned", {"TOCL_LOG_LEVEL=chatty"});
    INFO("stdout: " << streams.out << "\nstderr: " << streams.err);
    CheckOnlyWorkerLines(streams.out);
    CHECK(streams.err.find("[warning] tocl: TOCL_LOG_LEVEL='chatty' is not a level") !=
          std::string::npos);
  }
}

}  // namespace
}  // namespace tocl::testing
