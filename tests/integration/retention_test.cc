// Retention (issue #16): a daemon removes exited processes, their threads,
// attributes, endpoints and spawn logs `--retain-exited` seconds after they
// exited; Watch clients get a REMOVED event, Lookup a tombstone, Notify
// still reports the exit, `tocl ps --all` forgets them; replicas on other
// daemons follow the owner's removal. A running spawned program's log is
// held to `--spawn-log-max-bytes`, keeping its newest output.
#include <fmt/format.h>
#include <sys/stat.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon_harness.h"
#include "database_file.h"
#include "raw_directory.h"
#include "status_assertions.h"
#include "tocl/runtime.h"

namespace tocl::testing {
namespace {

using std::chrono::seconds;

const std::string kChild = TOCL_SPAWNED_CHILD_PATH;

// A Watch of `client` from its head on, kept on a thread of its own.
class Watcher {
 public:
  Watcher(std::unique_ptr<DirectoryClient> client, std::vector<ChangeOp> ops)
      : client_(std::move(client)) {
    const uint64_t head = client_->Ping().value_or(0);
    thread_ = std::thread([this, head, ops] {
      Status ended = client_->Watch(
          head,
          [this](const ChangeEvent& event) {
            std::lock_guard lock(mu_);
            events_.push_back(event);
            return true;
          },
          [this] { return stop_.load(); }, ops);
      std::lock_guard lock(mu_);
      ended_ = ended;
    });
  }
  ~Watcher() {
    stop_ = true;
    thread_.join();
  }

  // The first event of `op` for `gid`, once it came (within `timeout`).
  std::optional<ChangeEvent> WaitFor(ChangeOp op, Gid gid, std::chrono::milliseconds timeout) {
    std::optional<ChangeEvent> found;
    WaitUntil(
        [&] {
          std::lock_guard lock(mu_);
          for (const ChangeEvent& event : events_) {
            if (event.op == op && event.gid == gid) found = event;
          }
          return found.has_value();
        },
        timeout);
    return found;
  }

 private:
  std::unique_ptr<DirectoryClient> client_;
  std::mutex mu_;
  std::vector<ChangeEvent> events_;  // guarded by mu_
  Status ended_;                     // guarded by mu_
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last
};

// The tombstone Lookup answers once `gid` was removed.
Entity WaitRemoved(DirectoryClient& client, Gid gid) {
  Result<Entity> entity = client.Lookup(gid);
  const bool removed = WaitUntil(
      [&] {
        entity = client.Lookup(gid);
        return entity.ok() && entity->removed;
      },
      seconds(20));
  INFO(gid.ToString() << " was not removed: " << entity.status().ToString());
  REQUIRE(removed);
  return *entity;
}

// A daemon's options with `args` added to its command line.
DaemonOptions WithArgs(std::vector<std::string> args) {
  DaemonOptions options;
  options.extra_args = std::move(args);
  return options;
}

ProgramResult RunCli(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {CliPath()};
  argv.insert(argv.end(), args.begin(), args.end());
  return REQUIRE_VALUE(RunProgram(argv));
}

TEST_CASE("an exited spawned process is removed with its logs after the retention time",
          "[integration][retention]") {
  Daemon daemon(WithArgs({"--retain-exited", "1"}));
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  Watcher watcher(REQUIRE_VALUE(daemon.Connect()), {ChangeOp::kRemoved});

  tocl::SpawnOptions spawn;
  spawn.executable = kChild;
  spawn.args = {"--say", "hello", "--complain", "oops"};
  const SpawnedProcess child = REQUIRE_VALUE(client->SpawnProcess(spawn));
  CHECK(std::filesystem::exists(child.stdout_path));
  CHECK(std::filesystem::exists(child.stderr_path));

  const Entity tombstone = WaitRemoved(*client, child.gid);
  CHECK(tombstone.state == EntityState::kExited);
  CHECK(tombstone.kind == EntityKind::kProcess);
  CHECK_THAT(tombstone.exit_reason, Catch::Contains("removed from the directory"));
  // Its logs went with it: the sweeper deletes them right after the batch
  // that removed it is committed (and visible).
  CHECK(WaitUntil(
      [&] {
        return !std::filesystem::exists(child.stdout_path) &&
               !std::filesystem::exists(child.stderr_path);
      },
      seconds(10)));
  Result<LogChunk> log = client->ReadLog(child.gid, LogStream::kStdout);
  CHECK(log.status().code() == StatusCode::kNotFound);
  CHECK_THAT(log.status().message(), Catch::Contains("removed"));
  // Watch clients are told.
  std::optional<ChangeEvent> event = watcher.WaitFor(ChangeOp::kRemoved, child.gid, seconds(10));
  REQUIRE(event.has_value());
  CHECK(event->entity.removed);
  // The command line forgets it; a lookup says what happened.
  const ProgramResult ps = RunCli({"ps", "--all", "--daemon", daemon.address()});
  CHECK_THAT(ps.output, !Catch::Contains(child.gid.ToString()));
  const ProgramResult lookup =
      RunCli({"lookup", child.gid.ToString(), "--daemon", daemon.address()});
  CHECK(lookup.exit_code == 0);
  CHECK_THAT(lookup.output, Catch::Contains("removed from the directory"));
  // An id past every one handed out is still unknown.
  CHECK(client->Lookup(Gid::Process(1, child.gid.process_index() + 1000)).status().code() ==
        StatusCode::kNotFound);
}

TEST_CASE("a notification on a removed process reports its exit at once",
          "[integration][retention][notify]") {
  Daemon daemon(WithArgs({"--retain-exited", "0.5"}));
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  auto stub = NewRawStub(daemon.address());
  EnrollAttempt gone = RawEnroll(*stub, MakeRegister("short-lived"));
  REQUIRE(gone.status.ok());
  const Gid target = gone.enrollment->gid();
  REQUIRE(gone.enrollment->Goodbye().ok());
  WaitRemoved(*client, target);

  RuntimeOptions runtime_options;
  runtime_options.daemon_address = daemon.address();
  runtime_options.name = "watcher";
  auto runtime = REQUIRE_VALUE(Runtime::Start(runtime_options));
  const Gid self = REQUIRE_VALUE(runtime->EnrollThread("main"));
  constexpr Tag kTag = 7;
  REQUIRE_VALUE(runtime->Notify(self, target, kTag));
  Buffer message = REQUIRE_VALUE(runtime->RecvFor(self, seconds(10), target, kTag));
  const ExitNotice notice = REQUIRE_VALUE(ParseExitNotice(message));
  CHECK(notice.gid == target);
  CHECK(notice.what == ExitWhat::kExited);
  CHECK_THAT(notice.reason, Catch::Contains("removed from the directory"));
  // A thread of it too: it went with its process.
  const Gid thread = Gid::Thread(target, 1);
  REQUIRE_VALUE(runtime->Notify(self, thread, kTag));
  Buffer thread_message = REQUIRE_VALUE(runtime->RecvFor(self, seconds(10), thread, kTag));
  CHECK_THAT(REQUIRE_VALUE(ParseExitNotice(thread_message)).reason,
             Catch::Contains("its process " + target.ToString()));
  // Sends to it fail as sends to an exited process do.
  Status sent = runtime->Send(self, thread, kTag, std::as_bytes(std::span("late")));
  CHECK(sent.code() == StatusCode::kFailedPrecondition);
  REQUIRE_OK(runtime->Shutdown());
}

TEST_CASE("a running program's log keeps its newest output past the cap",
          "[integration][retention][spawn]") {
  constexpr uint64_t kCap = 64 << 10;
  constexpr uint64_t kWritten = 4 << 20;
  Daemon daemon(WithArgs({"--spawn-log-max-bytes", std::to_string(kCap)}));
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  tocl::SpawnOptions spawn;
  spawn.executable = kChild;
  spawn.args = {"--bytes", std::to_string(kWritten), "--then", "wait"};
  const SpawnedProcess child = REQUIRE_VALUE(client->SpawnProcess(spawn));
  // What it writes: "gid h1.pN\n", then 0123456789... (spawned_child.cc).
  const uint64_t prefix = ("gid " + child.gid.ToString() + "\n").size();
  const uint64_t total = prefix + kWritten;

  // The daemon checks its children's logs every second.
  struct stat info {};
  const bool capped = WaitUntil(
      [&] {
        return ::stat(child.stdout_path.c_str(), &info) == 0 &&
               static_cast<uint64_t>(info.st_size) == total &&
               static_cast<uint64_t>(info.st_blocks) * 512 <= kCap + 2 * info.st_blksize;
      },
      seconds(20));
  INFO("size " << info.st_size << ", allocated " << info.st_blocks * 512);
  REQUIRE(capped);

  // A reader from the start gets the newest output, and where it starts.
  LogChunk log = REQUIRE_VALUE(client->ReadLog(child.gid, LogStream::kStdout, 0));
  CHECK(log.size == total);
  CHECK(log.offset > prefix);
  CHECK(log.offset + log.data.size() == total);
  CHECK(log.data.size() >= kCap);
  CHECK(log.data.size() <= kCap + static_cast<uint64_t>(info.st_blksize));
  for (size_t i = 0; i < log.data.size(); ++i) {
    if (log.data[i] != static_cast<char>('0' + (log.offset + i - prefix) % 10)) {
      FAIL("byte " << log.offset + i << " is not what the child wrote there");
    }
  }
  // `tocl logs` prints it from the oldest byte kept.
  const ProgramResult printed =
      RunCli({"logs", child.gid.ToString(), "--daemon", daemon.address()});
  CHECK(printed.exit_code == 0);
  CHECK(printed.output == log.data);
  REQUIRE_OK(client->Kill(child.gid, SIGKILL));
}

TEST_CASE("log files whose process is gone are removed when the daemon starts",
          "[integration][retention][spawn]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  tocl::SpawnOptions spawn;
  spawn.executable = kChild;
  spawn.args = {"--say", "kept"};
  const SpawnedProcess kept = REQUIRE_VALUE(client->SpawnProcess(spawn));
  client.reset();
  REQUIRE(daemon.Stop().value_or(-1) == 0);
  // Left by a daemon that stopped between removing rows and files, or by
  // an older database.
  const std::string logs = daemon.state_dir() + "/logs";
  std::ofstream(logs + "/h1.p900.out") << "stray\n";
  std::ofstream(logs + "/h1.p900.err") << "stray\n";
  std::ofstream(logs + "/notes.txt") << "not a log\n";

  REQUIRE_OK(daemon.Start());
  CHECK_FALSE(std::filesystem::exists(logs + "/h1.p900.out"));
  CHECK_FALSE(std::filesystem::exists(logs + "/h1.p900.err"));
  CHECK(std::filesystem::exists(logs + "/notes.txt"));
  CHECK(std::filesystem::exists(kept.stdout_path));
}

TEST_CASE("the owner's removal reaches the other daemons' replicas and their watchers",
          "[integration][retention][cluster]") {
  Daemon seed(LoopbackClusterMember("seed", {"--seed", "--retain-exited", "1"}));
  REQUIRE_OK(seed.Start());
  const std::string seed_address = REQUIRE_VALUE(seed.tcp_address());
  // The other daemon keeps exited entities for ever: its replica of h1
  // still follows h1's removals.
  Daemon member(LoopbackClusterMember("member", {"--join", seed_address, "--retain-exited", "0"}));
  REQUIRE_OK(member.Start());
  auto member_stub = NewRawStub(member.address());
  REQUIRE(WaitForHost(*member_stub, "kind=host and name=seed") == Gid::Host(1));
  auto member_client = REQUIRE_VALUE(member.Connect());
  Watcher watcher(REQUIRE_VALUE(member.Connect()), {ChangeOp::kExited, ChangeOp::kRemoved});

  auto seed_stub = NewRawStub(seed.address());
  EnrollAttempt process = RawEnroll(*seed_stub, MakeRegister("short-lived", {{"role", "churn"}}));
  REQUIRE(process.status.ok());
  const Gid gid = process.enrollment->gid();
  REQUIRE(gid.host() == Gid::Host(1));
  REQUIRE(RawRegisterThreads(*seed_stub, process.enrollment->ThreadsRequest(
                                             {MakeThread(Gid::Thread(gid, 1), "worker")}))
              .ok());
  REQUIRE(process.enrollment->Goodbye().ok());

  // The member sees the exit, then the removal, and keeps no row of it.
  REQUIRE(watcher.WaitFor(ChangeOp::kExited, gid, seconds(20)).has_value());
  std::optional<ChangeEvent> removed = watcher.WaitFor(ChangeOp::kRemoved, gid, seconds(20));
  REQUIRE(removed.has_value());
  CHECK(removed->entity.removed);
  const Entity tombstone = WaitRemoved(*member_client, gid);
  CHECK(tombstone.state == EntityState::kExited);
  CHECK(WaitRemoved(*member_client, Gid::Thread(gid, 1)).kind == EntityKind::kThread);
  auto on_member = REQUIRE_VALUE(member_client->QueryAll("kind=process and host=h1"));
  CHECK(on_member.empty());
  auto db = REQUIRE_VALUE(DatabaseFile::Open(member.db_path()));
  const std::string range = fmt::format("BETWEEN {} AND {}", static_cast<int64_t>(gid.raw()),
                                        static_cast<int64_t>(gid.raw() | Gid::kMaxThread));
  CHECK(REQUIRE_VALUE(db.QueryInt("SELECT count(*) FROM processes WHERE gid " + range)) == 0);
  CHECK(REQUIRE_VALUE(db.QueryInt("SELECT count(*) FROM threads WHERE gid " + range)) == 0);
  CHECK(REQUIRE_VALUE(db.QueryInt("SELECT count(*) FROM attributes WHERE entity " + range)) == 0);
}

}  // namespace
}  // namespace tocl::testing
