// Runtime::Notify: one notice, by message or by callback, when a watched
// thread leaves, a watched process is killed with SIGKILL (the daemon marks
// it exited when its enroll stream breaks; also while the watchers' threads
// are already blocked in RecvFor), or was gone before the watch;
// CancelNotify; the errors of bad watches; ParseExitNotice on bad bytes.
//
// "Exactly one": after the notice under test, a later event in the same
// scope is awaited through a second watch (a sentinel); notices are
// delivered in event order by one thread, so a duplicate of the first would
// have arrived before the sentinel's.
#include <signal.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon_harness.h"
#include "spawn_worker_process.h"
#include "status_assertions.h"
#include "tocl/runtime.h"

namespace tocl::testing {
namespace {

using std::chrono::seconds;

std::unique_ptr<Runtime> StartTestRuntime(const Daemon& daemon, std::string name) {
  RuntimeOptions options;
  options.daemon_address = daemon.address();
  options.name = std::move(name);
  return REQUIRE_VALUE(Runtime::Start(options));
}

// Callback notices, kept for the test thread to look at.
struct Collected {
  std::mutex mu;
  std::vector<ExitNotice> notices;  // guarded by mu

  std::function<void(const ExitNotice&)> Callback() {
    return [this](const ExitNotice& notice) {
      std::lock_guard lock(mu);
      notices.push_back(notice);
    };
  }
  size_t size() {
    std::lock_guard lock(mu);
    return notices.size();
  }
  ExitNotice at(size_t i) {
    std::lock_guard lock(mu);
    return notices.at(i);
  }
};

// What most tests here start from: a daemon, a worker process it enrolled,
// and a runtime named "watcher". `collected` comes before the runtime: its
// callbacks may run until the runtime is gone (members are destroyed in
// reverse order).
struct WatchedWorker {
  explicit WatchedWorker(const std::string& worker_name)
      : worker(StartWorker(daemon, worker_name)), runtime(StartTestRuntime(daemon, "watcher")) {}

  static SpawnWorkerProcess StartWorker(Daemon& daemon, const std::string& name) {
    REQUIRE_OK(daemon.Start());
    return REQUIRE_VALUE(SpawnWorkerProcess::Start(daemon, name));
  }

  Daemon daemon;
  SpawnWorkerProcess worker;
  Collected collected;
  std::unique_ptr<Runtime> runtime;
};

ExitNotice ReceiveNotice(Runtime& runtime, Gid self, Gid target, Tag tag) {
  Buffer message = REQUIRE_VALUE(runtime.RecvFor(self, seconds(15), target, tag));
  CHECK(message.source() == target);
  CHECK(message.tag() == tag);
  return REQUIRE_VALUE(ParseExitNotice(message));
}

Status WaitExited(DirectoryClient& client, Gid gid) {
  const bool exited = WaitUntil(
      [&] {
        auto entity = client.Lookup(gid);
        return entity.ok() && entity->state == EntityState::kExited;
      },
      seconds(15));
  return exited ? Status::Ok() : DeadlineExceeded(gid.ToString() + " was not marked exited");
}

TEST_CASE("a thread that leaves is reported once, by message and by callback",
          "[integration][notify]") {
  WatchedWorker watched("target");
  SpawnWorkerProcess& worker = watched.worker;
  Collected& collected = watched.collected;
  std::unique_ptr<Runtime>& runtime = watched.runtime;
  const Gid me = REQUIRE_VALUE(runtime->EnrollThread("me"));

  // An echo thread waits for one message before it returns (and leaves).
  const Gid echo = REQUIRE_VALUE(runtime->SpawnThread(me, worker.process(), "echo"));
  REQUIRE_OK(runtime->Notify(me, echo, 40));
  REQUIRE_OK(runtime->Notify(echo, collected.Callback()));
  // Nothing yet: it runs.
  CHECK(runtime->TryRecv(me, echo, 40).status().code() == StatusCode::kTryAgain);

  REQUIRE_OK(runtime->RecvFor(me, seconds(10), echo, 1));
  REQUIRE_OK(runtime->Send(me, echo, 7, std::as_bytes(std::span("bye", 3))));
  const ExitNotice notice = ReceiveNotice(*runtime, me, echo, 40);
  CHECK(notice.gid == echo);
  CHECK(notice.what == ExitWhat::kExited);
  CHECK_FALSE(notice.exit_status.has_value());
  REQUIRE(WaitUntil([&] { return collected.size() == 1; }, seconds(15)));
  CHECK(collected.at(0).gid == echo);
  CHECK(collected.at(0).what == ExitWhat::kExited);

  // The process exits next; a sentinel on it comes after any duplicate.
  REQUIRE_OK(runtime->Notify(me, worker.process(), 41));
  CHECK(REQUIRE_VALUE(worker.Finish(seconds(10))) == 0);
  const ExitNotice process_notice = ReceiveNotice(*runtime, me, worker.process(), 41);
  CHECK(process_notice.gid == worker.process());
  CHECK(runtime->TryRecv(me, Gid(), 40).status().code() == StatusCode::kTryAgain);
  CHECK(collected.size() == 1);
}

TEST_CASE("a process killed with SIGKILL is reported to watchers of it and of its threads",
          "[integration][notify]") {
  WatchedWorker watched("doomed");
  SpawnWorkerProcess& worker = watched.worker;
  Collected& collected = watched.collected;
  std::unique_ptr<Runtime>& runtime = watched.runtime;
  const Gid me = REQUIRE_VALUE(runtime->EnrollThread("me"));
  const Gid blocked = REQUIRE_VALUE(runtime->SpawnThread(me, worker.process(), "block"));
  // A thread the directory has not heard of yet is accepted while its
  // process runs (registration is asynchronous).
  const Gid unregistered = Gid::Thread(worker.process(), 4000);

  REQUIRE_OK(runtime->Notify(me, worker.process(), 50));
  REQUIRE_OK(runtime->Notify(me, blocked, 51));
  REQUIRE_OK(runtime->Notify(me, unregistered, 52));
  REQUIRE_OK(runtime->Notify(worker.process(), collected.Callback()));

  REQUIRE_OK(worker.child().Kill());
  const ExitNotice process_notice = ReceiveNotice(*runtime, me, worker.process(), 50);
  CHECK(process_notice.gid == worker.process());
  CHECK(process_notice.what == ExitWhat::kExited);
  CHECK_FALSE(process_notice.reason.empty());
  const ExitNotice thread_notice = ReceiveNotice(*runtime, me, blocked, 51);
  // A registered thread has its own exit record (the daemon marks it with
  // its process); one the directory never knew is reported through its
  // process.
  CHECK(thread_notice.gid == blocked);
  CHECK(thread_notice.reason == process_notice.reason);
  const ExitNotice unregistered_notice = ReceiveNotice(*runtime, me, unregistered, 52);
  CHECK(unregistered_notice.gid == unregistered);
  CHECK(unregistered_notice.reason == fmt::format("its process {} exited ({})",
                                                  worker.process().ToString(),
                                                  process_notice.reason));
  REQUIRE(WaitUntil([&] { return collected.size() == 1; }, seconds(15)));
  CHECK(collected.at(0).gid == worker.process());

  // Once each: the sentinel on the already-exited process fires at once,
  // after any duplicate would have.
  REQUIRE_OK(runtime->Notify(me, worker.process(), 53));
  CHECK(ReceiveNotice(*runtime, me, worker.process(), 53).what == ExitWhat::kExited);
  for (Tag tag : {50u, 51u, 52u}) {
    CHECK(runtime->TryRecv(me, Gid(), tag).status().code() == StatusCode::kTryAgain);
  }
  CHECK(collected.size() == 1);
}

TEST_CASE("threads blocked in RecvFor before a kill -9 wake with its notice",
          "[integration][notify]") {
  WatchedWorker watched("doomed");
  SpawnWorkerProcess& worker = watched.worker;
  Collected& collected = watched.collected;
  std::unique_ptr<Runtime>& runtime = watched.runtime;
  // Two receivers: one of them polls for the process and sleeps in its
  // reactor, the other sleeps on its own mailbox; a notice must reach both.
  const Gid first = REQUIRE_VALUE(runtime->EnrollThread("first"));
  const Gid second = REQUIRE_VALUE(runtime->EnrollThread("second"));
  REQUIRE_OK(runtime->Notify(first, worker.process(), 55));
  REQUIRE_OK(runtime->Notify(second, worker.process(), 56));
  REQUIRE_OK(runtime->Notify(worker.process(), collected.Callback()));

  std::atomic<int> receiving{0};
  std::optional<Result<Buffer>> got_first, got_second;
  auto receive = [&](Gid self, Tag tag, std::optional<Result<Buffer>>& got) {
    return std::thread([&, self, tag] {
      receiving.fetch_add(1);
      got = runtime->RecvFor(self, seconds(30), worker.process(), tag);
    });
  };
  std::thread first_receiver = receive(first, 55, got_first);
  std::thread second_receiver = receive(second, 56, got_second);
  REQUIRE(WaitUntil([&] { return receiving.load() == 2; }, seconds(15)));
  // Nothing for them yet: the target runs.
  CHECK(runtime->TryRecv(first, worker.process(), 55).status().code() == StatusCode::kTryAgain);

  REQUIRE_OK(worker.child().Kill());
  first_receiver.join();
  second_receiver.join();
  for (std::optional<Result<Buffer>>* got : {&got_first, &got_second}) {
    REQUIRE(got->has_value());
    Buffer message = REQUIRE_VALUE(std::move(**got));
    CHECK(message.source() == worker.process());
    const ExitNotice notice = REQUIRE_VALUE(ParseExitNotice(message));
    CHECK(notice.gid == worker.process());
    CHECK(notice.what == ExitWhat::kExited);
  }
  REQUIRE(WaitUntil([&] { return collected.size() == 1; }, seconds(15)));
  CHECK(collected.at(0).gid == worker.process());
  CHECK(collected.at(0).what == ExitWhat::kExited);
}

TEST_CASE("watching what has already exited reports it at once", "[integration][notify]") {
  WatchedWorker watched("short-lived");
  Daemon& daemon = watched.daemon;
  SpawnWorkerProcess& worker = watched.worker;
  Collected& collected = watched.collected;
  std::unique_ptr<Runtime>& runtime = watched.runtime;
  auto client = REQUIRE_VALUE(daemon.Connect());
  const Gid me = REQUIRE_VALUE(runtime->EnrollThread("me"));
  const Gid left = REQUIRE_VALUE(runtime->SpawnThread(me, worker.process(), "count"));
  REQUIRE_OK(WaitExited(*client, left));

  // A thread that left, its process still running.
  REQUIRE_OK(runtime->Notify(me, left, 60));
  CHECK(ReceiveNotice(*runtime, me, left, 60).gid == left);

  CHECK(REQUIRE_VALUE(worker.Finish(seconds(10))) == 0);
  REQUIRE_OK(WaitExited(*client, worker.process()));
  REQUIRE_OK(runtime->Notify(me, worker.process(), 61));
  REQUIRE_OK(runtime->Notify(worker.process(), collected.Callback()));
  // A thread of an exited process the directory never knew.
  REQUIRE_OK(runtime->Notify(me, Gid::Thread(worker.process(), 77), 62));
  const ExitNotice notice = ReceiveNotice(*runtime, me, worker.process(), 61);
  CHECK(notice.what == ExitWhat::kExited);
  CHECK_THAT(notice.reason, Catch::Contains("exited normally"));
  const ExitNotice never_known = ReceiveNotice(*runtime, me, Gid::Thread(worker.process(), 77), 62);
  CHECK_THAT(never_known.reason, Catch::StartsWith("its process"));
  REQUIRE(WaitUntil([&] { return collected.size() == 1; }, seconds(15)));
  CHECK(collected.at(0).gid == worker.process());
}

TEST_CASE("a cancelled notification is never delivered", "[integration][notify]") {
  WatchedWorker watched("target");
  SpawnWorkerProcess& worker = watched.worker;
  Collected& collected = watched.collected;
  std::unique_ptr<Runtime>& runtime = watched.runtime;
  const Gid me = REQUIRE_VALUE(runtime->EnrollThread("me"));

  const uint64_t by_message = REQUIRE_VALUE(runtime->Notify(me, worker.process(), 70));
  const uint64_t by_callback =
      REQUIRE_VALUE(runtime->Notify(worker.process(), collected.Callback()));
  CHECK(by_message != by_callback);
  REQUIRE_OK(runtime->CancelNotify(by_message));
  REQUIRE_OK(runtime->CancelNotify(by_callback));
  CHECK(runtime->CancelNotify(by_message).code() == StatusCode::kNotFound);
  CHECK(runtime->CancelNotify(123456789).code() == StatusCode::kNotFound);

  // The sentinel, made after the cancelled ones, fires after them.
  REQUIRE_OK(runtime->Notify(me, worker.process(), 71));
  REQUIRE_OK(worker.child().Kill());
  CHECK(ReceiveNotice(*runtime, me, worker.process(), 71).gid == worker.process());
  CHECK(runtime->TryRecv(me, Gid(), 70).status().code() == StatusCode::kTryAgain);
  CHECK(collected.size() == 0);
  // A delivered notification cannot be cancelled.
  const uint64_t done = REQUIRE_VALUE(runtime->Notify(me, worker.process(), 72));
  REQUIRE_OK(runtime->RecvFor(me, seconds(15), worker.process(), 72));
  CHECK(runtime->CancelNotify(done).code() == StatusCode::kNotFound);
}

// The text a process the daemon spawned wrote to `stream` so far.
std::string LogText(DirectoryClient& client, Gid process, LogStream stream = LogStream::kStdout) {
  auto chunk = client.ReadLog(process, stream);
  return chunk.ok() ? chunk->data : std::string();
}

TEST_CASE("processes the daemon spawned report their exit signal and exit status",
          "[integration][notify][spawn]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  // Before the runtime: its callbacks may run until it is gone.
  Collected collected;
  auto runtime = StartTestRuntime(daemon, "parent");
  const Gid me = REQUIRE_VALUE(runtime->EnrollThread("me"));

  tocl::SpawnOptions options;
  options.executable = TOCL_SPAWN_WORKER_PATH;
  options.args = {"--daemon", daemon.address(), "--name", "child", "--until-signal"};
  const SpawnedProcess child = REQUIRE_VALUE(runtime->SpawnProcess(me, options));
  CHECK(child.gid.is_process());
  CHECK(child.os_pid > 0);
  // Enrolled when SpawnProcess returns; its parent is the spawning thread.
  const Entity entity = REQUIRE_VALUE(client->Lookup(child.gid));
  CHECK(entity.state == EntityState::kRunning);
  CHECK(entity.parent == me);
  CHECK(WaitUntil([&] { return LogText(*client, child.gid).find("ready\n") != std::string::npos; },
                  seconds(15)));
  CHECK(LogText(*client, child.gid).find(fmt::format("parent {}\n", me.ToString())) !=
        std::string::npos);
  // It serves spawn-thread requests like any process.
  const Gid thread = REQUIRE_VALUE(runtime->SpawnThread(me, child.gid, "count", {}));
  CHECK(thread.process() == child.gid);

  REQUIRE_OK(runtime->Notify(me, child.gid, 80));
  REQUIRE_OK(runtime->Notify(child.gid, collected.Callback()));
  REQUIRE_OK(client->Kill(child.gid, SIGKILL));
  const ExitNotice killed = ReceiveNotice(*runtime, me, child.gid, 80);
  CHECK(killed.what == ExitWhat::kExited);
  CHECK(killed.exit_signal == SIGKILL);
  CHECK_FALSE(killed.exit_status.has_value());
  REQUIRE(WaitUntil([&] { return collected.size() == 1; }, seconds(15)));
  CHECK(collected.at(0).exit_signal == SIGKILL);
  CHECK(WaitUntil(
      [&] {
        auto chunk = client->ReadLog(child.gid, LogStream::kStdout);
        return chunk.ok() && chunk->process_exited;
      },
      seconds(15)));
  // Reading from an offset gives the rest of the file.
  const LogChunk all = REQUIRE_VALUE(client->ReadLog(child.gid, LogStream::kStdout));
  CHECK(all.size == all.data.size());
  const LogChunk tail = REQUIRE_VALUE(client->ReadLog(child.gid, LogStream::kStdout, 8));
  CHECK(tail.data == all.data.substr(8));

  // One that exits by itself, watched after it is gone: reported at once,
  // with its status.
  options.args = {"--daemon", daemon.address(), "--name", "quitter", "--exit-code", "3"};
  const SpawnedProcess quitter = REQUIRE_VALUE(client->SpawnProcess(options));
  REQUIRE_OK(WaitExited(*client, quitter.gid));
  REQUIRE_OK(runtime->Notify(me, quitter.gid, 81));
  const ExitNotice exited = ReceiveNotice(*runtime, me, quitter.gid, 81);
  CHECK(exited.exit_status == 3);
  CHECK_FALSE(exited.exit_signal.has_value());
  CHECK(REQUIRE_VALUE(client->Lookup(quitter.gid)).exit_status == 3);
}

TEST_CASE("spawn, kill and log requests are checked before they are sent",
          "[integration][notify][spawn]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  tocl::SpawnOptions options;
  CHECK(client->SpawnProcess(options).status().code() == StatusCode::kInvalidArgument);
  options.executable = "/no/such/program";
  auto missing = client->SpawnProcess(options);
  CHECK(missing.status().code() == StatusCode::kNotFound);
  options.host = Gid::Host(1);
  options.where = "gpu=1";
  CHECK(client->SpawnProcess(options).status().code() == StatusCode::kInvalidArgument);
  options.where.clear();
  options.env = {"NOEQUALS"};
  CHECK(client->SpawnProcess(options).status().code() == StatusCode::kInvalidArgument);

  const Gid process = Gid::Process(1, 5);
  CHECK(client->Kill(Gid::Thread(1, 5, 1)).code() == StatusCode::kInvalidArgument);
  CHECK(client->Kill(process, 0).code() == StatusCode::kInvalidArgument);
  CHECK(client->Kill(process, 65).code() == StatusCode::kInvalidArgument);
  CHECK(client->ReadLog(Gid::Host(1), LogStream::kStderr).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(client->Kill(Gid::Process(1, 999'999)).code() == StatusCode::kNotFound);
}

// Two daemons on loopback (a seed, h1, and a member, h2) with short
// heartbeat timing. Processes of different hosts on one machine do not
// reach each other (loopback tcp is for one host only), but everything the
// directory says about a host going down does reach them.
DaemonOptions ClusterMember(std::string name) {
  DaemonOptions options;
  options.listen = "127.0.0.1:0";
  options.host_name = std::move(name);
  options.heartbeat_interval_seconds = 0.2;
  options.down_after_seconds = 1.0;
  return options;
}

TEST_CASE(
    "a host that stops answering is reported, and spawns and sends to it fail until it is back",
    "[integration][notify][cluster]") {
  DaemonOptions seed_options = ClusterMember("seed");
  seed_options.seed = true;
  Daemon seed(seed_options);
  REQUIRE_OK(seed.Start());
  DaemonOptions member_options = ClusterMember("member");
  member_options.join = {REQUIRE_VALUE(seed.tcp_address())};
  Daemon member(member_options);
  REQUIRE_OK(member.Start());

  SpawnWorkerProcess worker = REQUIRE_VALUE(SpawnWorkerProcess::Start(member, "remote"));
  const Gid remote_host = worker.process().host();
  // Before the runtime: its callbacks may run until it is gone.
  Collected collected;
  auto runtime = StartTestRuntime(seed, "watcher");
  REQUIRE(remote_host != runtime->gid().host());
  const Gid me = REQUIRE_VALUE(runtime->EnrollThread("me"));
  auto seed_client = REQUIRE_VALUE(seed.Connect());
  REQUIRE(WaitUntil([&] { return seed_client->Lookup(worker.process()).ok(); }, seconds(20)));

  REQUIRE_OK(runtime->Notify(me, remote_host, 90));
  REQUIRE_OK(runtime->Notify(me, worker.process(), 91));
  REQUIRE_OK(runtime->Notify(remote_host, collected.Callback()));

  REQUIRE_OK(member.Signal(SIGSTOP));
  const std::string down = fmt::format("host {} is down (no heartbeat)", remote_host.ToString());
  const ExitNotice host_notice = ReceiveNotice(*runtime, me, remote_host, 90);
  const ExitNotice process_notice = ReceiveNotice(*runtime, me, worker.process(), 91);
  CHECK(host_notice.what == ExitWhat::kUnreachable);
  CHECK(host_notice.reason == down);
  CHECK(process_notice.what == ExitWhat::kUnreachable);
  REQUIRE(WaitUntil([&] { return collected.size() == 1; }, seconds(15)));
  CHECK(collected.at(0).what == ExitWhat::kUnreachable);

  // While it is down: spawns and sends fail at once, and a new watch fires
  // at once.
  auto spawn = runtime->SpawnThread(me, worker.process(), "echo");
  CHECK(spawn.status() == Unavailable(down));
  const Status send =
      runtime->Send(me, Gid::Thread(worker.process(), 1), 1, std::as_bytes(std::span("x", 1)));
  CHECK(send == Unavailable(down));
  REQUIRE_OK(runtime->Notify(me, worker.process(), 92));
  CHECK(ReceiveNotice(*runtime, me, worker.process(), 92).what == ExitWhat::kUnreachable);

  REQUIRE_OK(member.Signal(SIGCONT));
  // Back: the next spawn looks the process up again (whatever it finds,
  // the host is no longer said to be down).
  CHECK(WaitUntil(
      [&] {
        return runtime->SpawnThread(me, worker.process(), "count").status().message() != down;
      },
      seconds(15)));
  CHECK(REQUIRE_VALUE(worker.Finish(seconds(10))) == 0);
  CHECK(collected.size() == 1);
}

TEST_CASE("bad watches are refused", "[integration][notify]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto runtime = StartTestRuntime(daemon, "watcher");
  const Gid me = REQUIRE_VALUE(runtime->EnrollThread("me"));
  const uint32_t host = me.host_index();

  auto no_process = runtime->Notify(me, Gid::Process(host, 999'999), 1);
  CHECK(no_process.status().code() == StatusCode::kNotFound);
  CHECK(runtime->Notify(me, Gid::Thread(host, 999'999, 1), 1).status().code() ==
        StatusCode::kNotFound);
  CHECK(runtime->Notify(me, Gid::Host(host + 100), 1).status().code() == StatusCode::kNotFound);
  CHECK(runtime->Notify(Gid::Host(host + 100), [](const ExitNotice&) {}).status().code() ==
        StatusCode::kNotFound);
  CHECK(runtime->Notify(me, Gid(), 1).status().code() == StatusCode::kInvalidArgument);
  CHECK(runtime->Notify(me, runtime->gid(), kAnyTag).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(runtime->Notify(Gid::Thread(runtime->gid(), 999), runtime->gid(), 1).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(runtime->Notify(runtime->gid(), nullptr).status().code() == StatusCode::kInvalidArgument);
  // Its own host and process run: accepted.
  REQUIRE_OK(runtime->CancelNotify(REQUIRE_VALUE(runtime->Notify(me, runtime->gid().host(), 1))));
  REQUIRE_OK(runtime->CancelNotify(REQUIRE_VALUE(runtime->Notify(me, runtime->gid(), 1))));
}

TEST_CASE("the names of the new states, operations and notices", "[notify]") {
  CHECK(EntityStateName(EntityState::kUnreachable) == "unreachable");
  CHECK(ChangeOpName(ChangeOp::kUnreachable) == "unreachable");
  CHECK(ChangeOpName(ChangeOp::kReachable) == "reachable");
  CHECK(ExitWhatName(ExitWhat::kExited) == "exited");
  CHECK(ExitWhatName(ExitWhat::kUnreachable) == "unreachable");
  CHECK(LogStreamName(LogStream::kStderr) == "stderr");
}

TEST_CASE("ParseExitNotice reads what Notify sends and refuses other bytes",
          "[integration][notify]") {
  const ExitNotice notice{.gid = Gid::Process(3, 17),
                          .what = ExitWhat::kExited,
                          .reason = "killed",
                          .exit_status = std::nullopt,
                          .exit_signal = 9};
  const std::vector<std::byte> good = EncodeExitNotice(notice);
  const ExitNotice back = REQUIRE_VALUE(ParseExitNotice(good));
  CHECK(back.gid == notice.gid);
  CHECK(back.reason == "killed");
  CHECK_FALSE(back.exit_status.has_value());
  CHECK(back.exit_signal == 9);

  for (size_t cut = 0; cut < good.size(); ++cut) {
    INFO("cut to " << cut << " bytes");
    CHECK(ParseExitNotice(std::span(good).first(cut)).status().code() ==
          StatusCode::kInvalidArgument);
  }
  std::vector<std::byte> longer = good;
  longer.push_back(std::byte{0});
  CHECK_FALSE(ParseExitNotice(longer).ok());
  std::vector<std::byte> bad_kind = good;
  bad_kind[12] = std::byte{7};
  CHECK_FALSE(ParseExitNotice(bad_kind).ok());
  std::vector<std::byte> bad_gid = good;
  std::fill(bad_gid.begin() + 4, bad_gid.begin() + 12, std::byte{0});
  CHECK_FALSE(ParseExitNotice(bad_gid).ok());
  CHECK_FALSE(ParseExitNotice(Buffer()).ok());

  // A message some thread sent with the notice's tag is not a notice.
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto runtime = StartTestRuntime(daemon, "parser");
  const Gid me = REQUIRE_VALUE(runtime->EnrollThread("me"));
  REQUIRE_OK(runtime->Send(me, me, 40, std::as_bytes(std::span("not a notice", 12))));
  Buffer message = REQUIRE_VALUE(runtime->RecvFor(me, seconds(5), me, 40));
  CHECK(ParseExitNotice(message).status().code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tocl::testing
