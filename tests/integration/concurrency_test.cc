// Many processes enrolling and registering threads with one daemon at once.
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "daemon_harness.h"
#include "status_assertions.h"

namespace tocl::testing {
namespace {

using std::chrono::seconds;

TEST_CASE("sixteen processes enrolling and registering 2,000 threads each at once all succeed",
          "[integration][concurrency]") {
  constexpr int kProcesses = 16;
  constexpr uint32_t kThreads = 2000;
  constexpr uint32_t kBatch = 250;

  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());

  std::vector<ChildProcess> workers;
  for (int i = 0; i < kProcesses; ++i) {
    auto argv = EnrollWorkerCommand(daemon.address(), "busy-" + std::to_string(i), kThreads, kBatch,
                                    /*hold=*/false);
    workers.push_back(REQUIRE_VALUE(ChildProcess::Spawn(argv)));
  }
  std::set<Gid> processes;
  for (ChildProcess& worker : workers) {
    Result<int> code = worker.Wait(seconds(120));
    INFO("worker output:\n" << worker.Output());
    REQUIRE(code.ok());
    CHECK(*code == 0);
    processes.insert(REQUIRE_VALUE(WorkerGid(worker.Output())));
  }
  CHECK(processes.size() == kProcesses);
  REQUIRE(daemon.running());

  auto threads = REQUIRE_VALUE(client->QueryAll("kind=thread"));
  CHECK(threads.size() == kProcesses * kThreads);
  std::map<Gid, uint32_t> per_process;
  std::set<Gid> distinct;
  for (const Entity& thread : threads) {
    CHECK(thread.kind == EntityKind::kThread);
    ++per_process[thread.gid.process()];
    distinct.insert(thread.gid);
  }
  CHECK(distinct.size() == threads.size());
  for (Gid process : processes) {
    INFO("process " << process.ToString());
    CHECK(per_process[process] == kThreads);
  }
  // Each worker said goodbye when it finished.
  CHECK(WaitUntil(
      [&] {
        auto running = client->QueryAll("kind=process and state=running");
        return running.ok() && running->empty();
      },
      seconds(10)));
  auto enrolled = REQUIRE_VALUE(client->QueryAll("kind=process"));
  CHECK(enrolled.size() == kProcesses);
  for (const Entity& process : enrolled) {
    CHECK(processes.contains(process.gid));
    CHECK(process.state == EntityState::kExited);
    CHECK(process.exit_reason == "worker done");
  }
  auto by_attribute = REQUIRE_VALUE(client->QueryAll("kind=thread and worker=busy-7 and batch=3"));
  CHECK(by_attribute.size() == kBatch);
  CHECK_OK(client->CheckHealth());
}

}  // namespace
}  // namespace tocl::testing
