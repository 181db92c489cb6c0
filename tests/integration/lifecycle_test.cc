// toclsd's life: clean stops, rival instances, corrupt databases, restarts
// that keep ids, processes that re-enroll after a restart and those that do
// not come back.
#include <signal.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <thread>

#include "daemon_harness.h"
#include "raw_directory.h"
#include "status_assertions.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), {});
}

TEST_CASE("SIGTERM stops toclsd cleanly with exit code 0 even with open streams",
          "[integration][lifecycle]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  // An enroll stream and a watch stream that are open when the signal comes.
  auto stub = NewRawStub(daemon.address());
  EnrollAttempt enrolled = RawEnroll(*stub, MakeRegister("still-here"));
  REQUIRE(enrolled.status.ok());
  grpc::ClientContext watch_context;
  pb::WatchRequest since_now;
  REQUIRE(RawPing(*stub, nullptr).ok());
  auto watch = stub->Watch(&watch_context, since_now);
  pb::ChangeEvent event;
  REQUIRE(watch->Read(&event));  // the stream is live: history arrives

  Result<int> stopped = daemon.Stop();
  INFO(stopped.status().ToString());
  REQUIRE(stopped.ok());
  CHECK(*stopped == 0);
  CHECK_FALSE(daemon.running());
  CHECK_FALSE(std::filesystem::exists(daemon.socket_path()));
  // The watch ends with the daemon.
  while (watch->Read(&event)) {
  }
  CHECK_FALSE(watch->Finish().ok());

  // And it starts again on the same state directory.
  REQUIRE_OK(daemon.Restart());
  CHECK(daemon.Stop().value_or(-1) == 0);
}

TEST_CASE("a second toclsd on the same state directory refuses to start",
          "[integration][lifecycle]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());

  std::vector<std::string> same = daemon.CommandLine();
  std::vector<std::string> other_socket = same;
  for (size_t i = 0; i + 1 < other_socket.size(); ++i) {
    if (other_socket[i] == "--socket") other_socket[i + 1] = daemon.state_dir() + "/other.sock";
  }
  for (const auto& argv : {same, other_socket}) {
    auto rival = REQUIRE_VALUE(RunProgram(argv, seconds(20)));
    INFO("rival output:\n" << rival.output);
    CHECK_FALSE(rival.timed_out);
    CHECK(rival.exit_code != 0);
    CHECK(rival.exit_code < 128);  // refused, not crashed
    CHECK_THAT(rival.output, Catch::Contains("already running"));
  }
  // The first one is unharmed: same process, socket still there, answering.
  REQUIRE(daemon.running());
  auto client = REQUIRE_VALUE(DirectoryClient::Connect(daemon.address(), seconds(2)));
  CHECK_OK(client->Ping());
  CHECK(daemon.Stop().value_or(-1) == 0);
}

TEST_CASE("a daemon on another state directory does not take over a live daemon's socket",
          "[integration][lifecycle]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  TempDir other_state("toclsd-other-state-");

  std::vector<std::string> argv = daemon.CommandLine();
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == "--state-dir") argv[i + 1] = other_state.path();
  }
  auto rival = REQUIRE_VALUE(RunProgram(argv, seconds(20)));
  INFO("rival output:\n" << rival.output);
  CHECK_FALSE(rival.timed_out);
  CHECK(rival.exit_code != 0);
  CHECK(rival.exit_code < 128);
  CHECK_THAT(rival.output, Catch::Contains("another daemon is listening"));
  // The socket still leads to the first daemon.
  auto client = REQUIRE_VALUE(DirectoryClient::Connect(daemon.address(), seconds(2)));
  auto host = REQUIRE_VALUE(client->Lookup(Gid::Host(1)));
  CHECK(daemon.running());
  CHECK(daemon.Stop().value_or(-1) == 0);
}

TEST_CASE("a goodbye reason is stored as valid text, cut at a character boundary",
          "[integration][lifecycle]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(DirectoryClient::Connect(daemon.address(), seconds(2)));
  const std::string long_reason = std::string(255, 'x') + "\xc3\xa9 and more";  // é spans 255-256
  const std::pair<std::string, std::string> cases[] = {
      {long_reason, std::string(255, 'x')},
      {"bell \x07 in it", "exited (its reason was not valid text)"},
      {"", "exited normally"},
  };
  for (const auto& [reason, stored] : cases) {
    EnrollOptions options;
    options.name = "leaver";
    auto session = REQUIRE_VALUE(client->Enroll(options));
    const Gid gid = session->gid();
    CHECK_OK(session->Close(reason));
    Entity process;
    CHECK(WaitUntil(
        [&] {
          auto found = client->Lookup(gid);
          if (!found.ok()) return false;
          process = *found;
          return process.state == EntityState::kExited;
        },
        seconds(10)));
    CHECK(process.exit_reason == stored);
  }
  CHECK(daemon.Stop().value_or(-1) == 0);
}

TEST_CASE("a corrupt database makes toclsd exit non-zero with a clear message",
          "[integration][lifecycle]") {
  Daemon daemon;
  std::string garbage = "this is not an SQLite database, just bytes\n";
  std::mt19937 random(42);
  while (garbage.size() < 64 * 1024) garbage.push_back(static_cast<char>(random()));
  {
    std::ofstream file(daemon.db_path(), std::ios::binary);
    file << garbage;
  }
  auto result = REQUIRE_VALUE(RunProgram(daemon.CommandLine(), seconds(20)));
  INFO("toclsd output:\n" << result.output);
  CHECK_FALSE(result.timed_out);
  CHECK(result.exit_code != 0);
  CHECK(result.exit_code < 128);  // a refusal, not a crash
  CHECK_THAT(result.output, Catch::Contains("database", Catch::CaseSensitive::No));
  CHECK_THAT(result.output, Catch::Contains("directory.db"));
  // It did not "repair" the file by replacing it.
  CHECK(ReadFile(daemon.db_path()) == garbage);
}

TEST_CASE("a restarted daemon keeps its host id and never reuses a process id",
          "[integration][lifecycle]") {
  DaemonOptions options;
  options.host_name = "node-a";
  Daemon daemon(options);
  REQUIRE_OK(daemon.Start());

  Gid first;
  {
    auto client = REQUIRE_VALUE(daemon.Connect());
    auto session = REQUIRE_VALUE(client->Enroll(ProcessNamed("first")));
    first = session->gid();
    CHECK(session->host() == Gid::Host(1));
    CHECK(session->host_name() == "node-a");
    CHECK_OK(session->Close());
  }
  REQUIRE(daemon.Stop().value_or(-1) == 0);
  REQUIRE_OK(daemon.Restart());

  auto client = REQUIRE_VALUE(daemon.Connect());
  auto host = REQUIRE_VALUE(client->Lookup(Gid::Host(1)));
  CHECK(host.kind == EntityKind::kHost);
  CHECK(host.name == "node-a");
  auto hosts = REQUIRE_VALUE(client->QueryAll("kind=host"));
  CHECK(hosts.size() == 1);
  auto old = REQUIRE_VALUE(client->Lookup(first));
  CHECK(old.name == "first");
  CHECK(old.state == EntityState::kExited);

  // A process enrolled just before a crash still holds its number afterwards.
  auto stub = NewRawStub(daemon.address());
  EnrollAttempt second = RawEnroll(*stub, MakeRegister("second"));
  REQUIRE(second.status.ok());
  CHECK(second.enrollment->gid().host() == Gid::Host(1));
  const Gid second_gid = second.enrollment->gid();
  CHECK(second_gid.process_index() > first.process_index());
  REQUIRE_OK(daemon.Kill());
  second.enrollment.reset();
  stub.reset();
  REQUIRE_OK(daemon.Restart());

  client = REQUIRE_VALUE(daemon.Connect());
  auto third = REQUIRE_VALUE(client->Enroll(ProcessNamed("third")));
  CHECK(third->host() == Gid::Host(1));
  CHECK(third->gid().process_index() > second_gid.process_index());
  CHECK(REQUIRE_VALUE(client->Lookup(Gid::Host(1))).name == "node-a");
  CHECK_OK(third->Close());
}

TEST_CASE("an enrolled process keeps its gid across a daemon restart and a crash",
          "[integration][lifecycle]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  auto session = REQUIRE_VALUE(client->Enroll(ProcessNamed("survivor", {{"role", "x"}})));
  const Gid gid = session->gid();
  REQUIRE_OK(session->RegisterThreads(MakeThreads(gid, 1, 10, "t")));
  CHECK(session->reenroll_count() == 0);

  for (uint64_t round = 1; round <= 2; ++round) {
    INFO("round " << round << (round == 1 ? " (SIGTERM)" : " (SIGKILL)"));
    if (round == 1) {
      REQUIRE(daemon.Stop().value_or(-1) == 0);
    } else {
      REQUIRE_OK(daemon.Kill());
    }
    REQUIRE_OK(daemon.Restart());
    CHECK(WaitUntil([&] { return session->reenroll_count() >= round; }, seconds(20)));
    CHECK(session->reenroll_count() == round);
    CHECK(session->gid() == gid);
    const uint32_t first = 1 + 10 * static_cast<uint32_t>(round);
    CHECK_OK(session->RegisterThreads(MakeThreads(gid, first, 10, "t")));

    auto fresh = REQUIRE_VALUE(daemon.Connect());
    auto process = REQUIRE_VALUE(fresh->Lookup(gid));
    CHECK(process.state == EntityState::kRunning);
    CHECK(process.name == "survivor");
    CHECK(process.attributes.at("role") == "x");
    auto threads = REQUIRE_VALUE(
        fresh->QueryAll("kind=thread and state=running and process=" + gid.ToString()));
    CHECK(threads.size() == 10 * (round + 1));
  }
  CHECK_OK(session->Close("finished"));
  Entity process;
  CHECK(WaitUntil(
      [&] {
        process = client->Lookup(gid).value_or(Entity());
        return process.state == EntityState::kExited;
      },
      seconds(10)));
  CHECK(process.exit_reason == "finished");
}

TEST_CASE("a process that does not re-enroll within the grace period is marked exited",
          "[integration][lifecycle]") {
  DaemonOptions options;
  options.grace_period_seconds = 1;
  Daemon daemon(options);
  REQUIRE_OK(daemon.Start());

  // "lost" dies while the daemon is down; "back" re-enrolls; "silent" (an
  // enroll stream of this test process, so its OS process lives on) never
  // comes back.
  SpawnOptions spawn;
  spawn.pipe_stdin = true;
  auto lost = REQUIRE_VALUE(ChildProcess::Spawn(
      EnrollWorkerCommand(daemon.address(), "lost", 2, 2, /*hold=*/true), spawn));
  auto back = REQUIRE_VALUE(ChildProcess::Spawn(
      EnrollWorkerCommand(daemon.address(), "back", 2, 2, /*hold=*/true), spawn));
  for (ChildProcess* worker : {&lost, &back}) {
    bool holding = WaitUntil(
        [&] { return worker->Output().find("holding\n") != std::string::npos || worker->Exited(); },
        seconds(30));
    INFO("worker output:\n" << worker->Output());
    REQUIRE(holding);
    REQUIRE(worker->running());
  }
  const Gid lost_gid = REQUIRE_VALUE(WorkerGid(lost.Output()));
  const Gid back_gid = REQUIRE_VALUE(WorkerGid(back.Output()));
  auto stub = NewRawStub(daemon.address());
  EnrollAttempt silent = RawEnroll(*stub, MakeRegister("silent"));
  REQUIRE(silent.status.ok());
  const Gid silent_gid = silent.enrollment->gid();
  const Gid silent_thread = Gid::Thread(silent_gid, 1);
  REQUIRE(RawRegisterThreads(
              *stub, silent.enrollment->ThreadsRequest({MakeThread(silent_thread, "quiet")}))
              .ok());

  REQUIRE(daemon.Stop().value_or(-1) == 0);
  CHECK(lost.Kill().value_or(-1) == 128 + SIGKILL);
  const auto restarted_at = std::chrono::system_clock::now();
  REQUIRE_OK(daemon.Restart());

  auto client = REQUIRE_VALUE(daemon.Connect());
  auto exited = [&](Gid gid) {
    auto found = client->Lookup(gid);
    return found.ok() && found->state == EntityState::kExited;
  };
  CHECK(WaitUntil([&] { return exited(lost_gid) && exited(silent_gid); }, seconds(20),
                  milliseconds(50)));
  for (Gid gid :
       {lost_gid, Gid::Thread(lost_gid, 1), Gid::Thread(lost_gid, 2), silent_gid, silent_thread}) {
    INFO(gid.ToString());
    auto entity = REQUIRE_VALUE(client->Lookup(gid));
    CHECK(entity.state == EntityState::kExited);
    CHECK_FALSE(entity.exit_reason.empty());
  }
  // A process that may still come back gets the whole grace period.
  auto quiet = REQUIRE_VALUE(client->Lookup(silent_gid));
  CHECK(quiet.exited_at - restarted_at >= milliseconds(900));

  // "back" re-enrolled in time and is still running after the grace period.
  auto survivor = REQUIRE_VALUE(client->Lookup(back_gid));
  CHECK(survivor.state == EntityState::kRunning);
  back.CloseStdin();
  Result<int> code = back.Wait(seconds(20));
  INFO("worker output:\n" << back.Output());
  REQUIRE(code.ok());
  CHECK(*code == 0);
  Entity left;
  CHECK(WaitUntil(
      [&] {
        left = client->Lookup(back_gid).value_or(Entity());
        return left.state == EntityState::kExited;
      },
      seconds(10)));
  CHECK(left.exit_reason == "worker done");
}

}  // namespace
}  // namespace tocl::testing
