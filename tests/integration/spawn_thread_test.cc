// Runtime::SpawnThread: threads started in another process (a
// tocl-spawn-worker with the entries echo, count and block) and in the
// test's own process, over the data plane; the errors a caller sees; the
// runtime's reserved thread ids; and the request/reply codec against bad
// bytes.
#include <signal.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "daemon_harness.h"
#include "runtime/internal_threads.h"
#include "runtime/spawn_protocol.h"
#include "spawn_worker_process.h"
#include "status_assertions.h"
#include "tocl/runtime.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::span<const std::byte> Bytes(std::string_view text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

std::string Text(const Buffer& buffer) {
  return std::string(reinterpret_cast<const char*>(buffer.data()), buffer.size());
}

std::unique_ptr<Runtime> StartTestRuntime(const Daemon& daemon, std::string name) {
  RuntimeOptions options;
  options.daemon_address = daemon.address();
  options.name = std::move(name);
  return REQUIRE_VALUE(Runtime::Start(options));
}

// Entries of the test process itself, registered once for the binary.
struct LocalEntries {
  LocalEntries() {
    (void)register_entry("test.reply", [](ThreadContext& context) {
      (void)context.runtime.Send(context.self, context.spawner, 5, context.payload);
    });
    (void)register_entry("test.block", [this](ThreadContext& context) {
      auto message = context.runtime.Recv(context.self);
      block_status.store(static_cast<int>(message.status().code()));
    });
  }
  std::atomic<int> block_status{-1};
};

LocalEntries& Local() {
  static LocalEntries entries;
  return entries;
}

TEST_CASE("a thread spawned in another process gets its payload and receives messages",
          "[integration][spawn]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  SpawnWorkerProcess worker = REQUIRE_VALUE(SpawnWorkerProcess::Start(daemon, "target"));
  auto runtime = StartTestRuntime(daemon, "spawner");
  const Gid me = REQUIRE_VALUE(runtime->EnrollThread("me"));

  const Gid thread =
      REQUIRE_VALUE(runtime->SpawnThread(me, worker.process(), "echo", Bytes("hello there")));
  CHECK(thread.is_thread());
  CHECK(thread.process() == worker.process());
  CHECK_FALSE(runtime::IsInternalThread(thread));

  // The payload, from the new thread.
  Buffer payload = REQUIRE_VALUE(runtime->RecvFor(me, seconds(10), thread, 1));
  CHECK(Text(payload) == "hello there");
  // It receives: what we send comes back.
  REQUIRE_OK(runtime->Send(me, thread, 7, Bytes("ping")));
  Buffer echoed = REQUIRE_VALUE(runtime->RecvFor(me, seconds(10), thread, 2));
  CHECK(Text(echoed) == "ping");

  // The directory knows it by its entry's name, and that it left when the
  // entry returned.
  auto client = REQUIRE_VALUE(daemon.Connect());
  CHECK(WaitUntil(
      [&] {
        auto entity = client->Lookup(thread);
        return entity.ok() && entity->state == EntityState::kExited && entity->name == "echo";
      },
      seconds(10)));
  CHECK(REQUIRE_VALUE(worker.Finish(seconds(10))) == 0);
}

TEST_CASE("spawn-thread errors: unknown entry, bad requests, an exited process",
          "[integration][spawn]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  SpawnWorkerProcess worker = REQUIRE_VALUE(SpawnWorkerProcess::Start(daemon, "target"));
  auto runtime = StartTestRuntime(daemon, "spawner");
  const Gid me = REQUIRE_VALUE(runtime->EnrollThread("me"));

  auto unknown = runtime->SpawnThread(me, worker.process(), "nope");
  REQUIRE(unknown.status().code() == StatusCode::kNotFound);
  CHECK(unknown.status().message() ==
        fmt::format("process {} has no entry named 'nope' (registered: block, count, echo)",
                    worker.process().ToString()));

  CHECK(runtime->SpawnThread(me, worker.process(), "bad name").status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(runtime->SpawnThread(me, worker.process(), "").status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(runtime->SpawnThread(me, me, "echo").status().code() == StatusCode::kInvalidArgument);
  const std::vector<std::byte> too_big(runtime->short_max_payload(), std::byte{1});
  auto big = runtime->SpawnThread(me, worker.process(), "echo", too_big);
  CHECK(big.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(big.status().message(), Catch::Contains("larger than one message allows"));
  // The largest payload that fits does go.
  const std::vector<std::byte> fits(runtime->short_max_payload() - kSpawnThreadOverhead,
                                    std::byte{'x'});
  const Gid echo = REQUIRE_VALUE(runtime->SpawnThread(me, worker.process(), "echo", fits));
  CHECK(REQUIRE_VALUE(runtime->RecvFor(me, seconds(10), echo, 1)).size() == fits.size());
  REQUIRE_OK(runtime->Send(me, echo, 7, Bytes("done")));

  // A process that no longer runs: the usual send error.
  CHECK(REQUIRE_VALUE(worker.Finish(seconds(10))) == 0);
  auto client = REQUIRE_VALUE(daemon.Connect());
  REQUIRE(WaitUntil(
      [&] {
        auto entity = client->Lookup(worker.process());
        return entity.ok() && entity->state == EntityState::kExited;
      },
      seconds(10)));
  auto gone = runtime->SpawnThread(me, worker.process(), "echo", {}, seconds(5));
  CHECK(gone.status().code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(gone.status().message(), Catch::Contains("has exited"));

  // No such process at all.
  const Gid nobody = Gid::Process(me.host_index(), 999'999);
  CHECK(runtime->SpawnThread(me, nobody, "echo").status().code() == StatusCode::kNotFound);
}

TEST_CASE("a spawn-thread request that gets no reply in time fails, and later calls still work",
          "[integration][spawn]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  SpawnWorkerProcess worker = REQUIRE_VALUE(SpawnWorkerProcess::Start(daemon, "target"));
  auto runtime = StartTestRuntime(daemon, "spawner");
  const Gid me = REQUIRE_VALUE(runtime->EnrollThread("me"));
  // Connected first, so the stopped process's peer is already resolved.
  const Gid first = REQUIRE_VALUE(runtime->SpawnThread(me, worker.process(), "count"));
  CHECK(first.is_thread());

  REQUIRE_OK(worker.child().Signal(SIGSTOP));
  REQUIRE(WaitUntil([&] { return Stopped(worker.child().pid()); }, seconds(10)));
  const auto started = std::chrono::steady_clock::now();
  auto late = runtime->SpawnThread(me, worker.process(), "count", Bytes("1"), milliseconds(300));
  const auto waited = std::chrono::steady_clock::now() - started;
  REQUIRE_OK(worker.child().Signal(SIGCONT));
  CHECK(late.status().code() == StatusCode::kDeadlineExceeded);
  CHECK(waited >= milliseconds(300));
  CHECK(waited < seconds(5));

  // The late thread does run (its message comes) and its late reply does
  // not confuse the next call.
  Buffer message = REQUIRE_VALUE(runtime->RecvFor(me, seconds(10), worker.process(), 3));
  const Gid late_thread = message.source();
  const Gid next = REQUIRE_VALUE(runtime->SpawnThread(me, worker.process(), "count", Bytes("1")));
  CHECK(next != late_thread);
  CHECK(Text(REQUIRE_VALUE(runtime->RecvFor(me, seconds(10), next, 3))) == "0");
  CHECK(REQUIRE_VALUE(worker.Finish(seconds(10))) == 0);
}

TEST_CASE("64 threads spawn threads in another process at once", "[integration][spawn]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  SpawnWorkerProcess worker = REQUIRE_VALUE(SpawnWorkerProcess::Start(daemon, "target"));
  auto runtime = StartTestRuntime(daemon, "spawner");
  constexpr int kCallers = 64;
  std::vector<Gid> callers;
  for (int i = 0; i < kCallers; ++i) {
    callers.push_back(REQUIRE_VALUE(runtime->EnrollThread(fmt::format("caller{}", i))));
  }
  std::vector<Gid> spawned(kCallers);
  std::vector<std::string> errors(kCallers);
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < kCallers; ++i) {
      threads.emplace_back([&, i] {
        auto thread =
            runtime->SpawnThread(callers[i], worker.process(), "count", Bytes("2"), seconds(30));
        if (!thread.ok()) {
          errors[i] = thread.status().ToString();
          return;
        }
        spawned[i] = *thread;
        for (const char* expected : {"0", "1"}) {
          auto message = runtime->RecvFor(callers[i], seconds(30), *thread, 3);
          if (!message.ok() || Text(*message) != expected) {
            errors[i] = message.ok() ? "got " + Text(*message) : message.status().ToString();
            return;
          }
        }
      });
    }
  }
  std::set<Gid> distinct;
  for (int i = 0; i < kCallers; ++i) {
    INFO("caller " << i);
    CHECK(errors[i].empty());
    CHECK(spawned[i].process() == worker.process());
    distinct.insert(spawned[i]);
  }
  CHECK(distinct.size() == kCallers);
  CHECK(REQUIRE_VALUE(worker.Finish(seconds(10))) == 0);
}

TEST_CASE("a thread spawned in the caller's own process runs a local entry",
          "[integration][spawn]") {
  Local();
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto runtime = StartTestRuntime(daemon, "self");
  const Gid me = REQUIRE_VALUE(runtime->EnrollThread("me"));
  const Gid thread =
      REQUIRE_VALUE(runtime->SpawnThread(me, runtime->gid(), "test.reply", Bytes("local")));
  CHECK(thread.process() == runtime->gid());
  CHECK(Text(REQUIRE_VALUE(runtime->RecvFor(me, seconds(10), thread, 5))) == "local");
}

TEST_CASE("shutdown wakes an entry thread blocked in Recv and waits for it",
          "[integration][spawn]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  SECTION("in the test's process") {
    LocalEntries& local = Local();
    local.block_status = -1;
    auto runtime = StartTestRuntime(daemon, "self");
    const Gid me = REQUIRE_VALUE(runtime->EnrollThread("me"));
    REQUIRE_OK(runtime->SpawnThread(me, runtime->gid(), "test.block"));
    REQUIRE_OK(runtime->Shutdown(seconds(5)));
    // Shutdown returned: the entry has returned too, with what Recv said.
    CHECK(local.block_status.load() == static_cast<int>(StatusCode::kCancelled));
  }
  SECTION("in a worker process") {
    SpawnWorkerProcess worker = REQUIRE_VALUE(SpawnWorkerProcess::Start(daemon, "target"));
    auto runtime = StartTestRuntime(daemon, "spawner");
    const Gid me = REQUIRE_VALUE(runtime->EnrollThread("me"));
    REQUIRE_OK(runtime->SpawnThread(me, worker.process(), "block"));
    REQUIRE_OK(runtime->SpawnThread(me, worker.process(), "block"));
    CHECK(REQUIRE_VALUE(worker.Finish(seconds(20))) == 0);
    const std::string output = worker.Output();
    INFO(output);
    CHECK(worker.HasLine("block-returned cancelled"));
    CHECK(worker.HasLine("shutdown ok"));
    // Both entries returned before the shutdown finished.
    CHECK(output.rfind("block-returned") < output.find("shutdown ok"));
  }
}

TEST_CASE("the runtime's own thread ids are neither in the directory nor usable",
          "[integration][spawn]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  SpawnWorkerProcess worker = REQUIRE_VALUE(SpawnWorkerProcess::Start(daemon, "target"));
  auto runtime = StartTestRuntime(daemon, "spawner");
  const Gid me = REQUIRE_VALUE(runtime->EnrollThread("me"));
  const Gid thread = REQUIRE_VALUE(runtime->SpawnThread(me, worker.process(), "count"));

  const Gid service = runtime::ServiceOf(worker.process());
  const Gid own_reply = Gid::Thread(runtime->gid(), runtime::kFirstInternalThread);
  CHECK(runtime->Send(me, service, 1, Bytes("x")).code() == StatusCode::kInvalidArgument);
  CHECK(runtime->Send(own_reply, me, 1, Bytes("x")).code() == StatusCode::kInvalidArgument);
  CHECK(runtime->TryRecv(own_reply).status().code() == StatusCode::kInvalidArgument);
  CHECK(runtime->TryRecv(runtime::ServiceOf(runtime->gid())).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(runtime->LeaveThread(own_reply).code() == StatusCode::kInvalidArgument);
  CHECK(runtime->Notify(me, service, 1).status().code() == StatusCode::kInvalidArgument);

  // The directory has the worker's spawned thread and none of the
  // internal mailboxes of either process.
  auto client = REQUIRE_VALUE(daemon.Connect());
  REQUIRE(WaitUntil([&] { return client->Lookup(thread).ok(); }, seconds(10)));
  for (Gid process : {worker.process(), runtime->gid()}) {
    auto threads = REQUIRE_VALUE(
        client->QueryAll(fmt::format("kind=thread and process={}", process.ToString())));
    for (const Entity& entity : threads) {
      INFO(entity.gid.ToString());
      CHECK_FALSE(runtime::IsInternalThread(entity.gid));
    }
  }
  CHECK(REQUIRE_VALUE(worker.Finish(seconds(10))) == 0);
}

TEST_CASE("register_entry refuses a name twice, bad names and empty functions", "[spawn]") {
  const Entry nothing = [](ThreadContext&) {};
  REQUIRE_OK(register_entry("test.twice", nothing));
  auto again = register_entry("test.twice", nothing);
  CHECK(again.code() == StatusCode::kAlreadyExists);
  CHECK(again.message() == "an entry named 'test.twice' is already registered");
  CHECK(register_entry("", nothing).code() == StatusCode::kInvalidArgument);
  CHECK(register_entry("9lives", nothing).code() == StatusCode::kInvalidArgument);
  CHECK(register_entry("has space", nothing).code() == StatusCode::kInvalidArgument);
  CHECK(register_entry(std::string(kMaxEntryNameBytes + 1, 'a'), nothing).code() ==
        StatusCode::kInvalidArgument);
  CHECK(register_entry("test.empty", Entry()).code() == StatusCode::kInvalidArgument);
  REQUIRE_OK(register_entry(std::string(kMaxEntryNameBytes, 'a'), nothing));
  REQUIRE_OK(register_entry("ns::name-1.2", nothing));
}

TEST_CASE("a process started with a malformed TOCL_PARENT does not start", "[integration][spawn]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  for (const char* parent : {"TOCL_PARENT=h1.p2", "TOCL_PARENT=thread-one"}) {
    INFO(parent);
    ProgramResult result = REQUIRE_VALUE(
        RunProgram({TOCL_SPAWN_WORKER_PATH, "--daemon", daemon.address(), "--exit-code", "0"},
                   seconds(30), {parent}));
    CHECK(result.exit_code == 4);
    CHECK_THAT(result.output, Catch::Contains("start-failed invalid argument: TOCL_PARENT="));
  }
  ProgramResult good = REQUIRE_VALUE(
      RunProgram({TOCL_SPAWN_WORKER_PATH, "--daemon", daemon.address(), "--exit-code", "0"},
                 seconds(30), {"TOCL_PARENT=h1.p2.t3"}));
  CHECK(good.exit_code == 0);
  CHECK_THAT(good.output, Catch::Contains("parent h1.p2.t3\n"));
}

TEST_CASE("spawn-thread requests and replies are decoded with every length checked", "[spawn]") {
  using runtime::DecodeSpawnReply;
  using runtime::DecodeSpawnRequest;
  const std::string payload = "payload";
  runtime::SpawnRequest request{
      .id = 42, .spawner = Gid::Thread(1, 2, 3), .entry = "echo", .payload = Bytes(payload)};
  const std::vector<std::byte> good = runtime::EncodeSpawnRequest(request);
  uint64_t id = 0;
  auto decoded = REQUIRE_VALUE(DecodeSpawnRequest(good, id));
  CHECK(id == 42);
  CHECK(decoded.entry == "echo");
  CHECK(decoded.spawner == Gid::Thread(1, 2, 3));
  CHECK(std::string(reinterpret_cast<const char*>(decoded.payload.data()),
                    decoded.payload.size()) == payload);

  for (size_t cut = 0; cut < good.size(); ++cut) {
    INFO("cut to " << cut << " bytes");
    CHECK(DecodeSpawnRequest(std::span(good).first(cut), id).status().code() ==
          StatusCode::kInvalidArgument);
  }
  std::vector<std::byte> longer = good;
  longer.push_back(std::byte{0});
  CHECK_FALSE(DecodeSpawnRequest(longer, id).ok());
  std::vector<std::byte> bad_entry = good;
  bad_entry[runtime::kSpawnRequestHeaderBytes] = std::byte{' '};
  CHECK_FALSE(DecodeSpawnRequest(bad_entry, id).ok());
  std::vector<std::byte> huge_payload_length = good;
  huge_payload_length[24] = std::byte{0xff};
  huge_payload_length[27] = std::byte{0xff};
  CHECK_FALSE(DecodeSpawnRequest(huge_payload_length, id).ok());

  runtime::SpawnReply reply;
  reply.id = 7;
  reply.status = NotFound("no entry");
  auto back = REQUIRE_VALUE(DecodeSpawnReply(runtime::EncodeSpawnReply(reply)));
  CHECK(back.id == 7);
  CHECK(back.status == NotFound("no entry"));
  std::vector<std::byte> reply_bytes = runtime::EncodeSpawnReply(reply);
  reply_bytes.pop_back();
  CHECK_FALSE(DecodeSpawnReply(reply_bytes).ok());
  runtime::SpawnReply ok_without_thread;  // ok, but no thread named
  CHECK_FALSE(DecodeSpawnReply(runtime::EncodeSpawnReply(ok_without_thread)).ok());
}

}  // namespace
}  // namespace tocl::testing
