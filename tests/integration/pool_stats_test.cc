// Pool statistics: reported by processes on their enroll streams, kept by
// the daemon in memory while the stream lasts, read with GetPoolStats.
#include "tocl/pool_stats.h"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "daemon_harness.h"
#include "raw_directory.h"
#include "status_assertions.h"
#include "tocl/directory_client.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

PoolClassStats Class(std::string network, uint64_t class_bytes, uint64_t in_use) {
  return PoolClassStats{.network = std::move(network),
                        .class_bytes = class_bytes,
                        .in_use = in_use,
                        .free = 64 - in_use,
                        .provided = 8,
                        .grown = 1,
                        .bytes_registered = 64 * class_bytes};
}

bool SameClass(const PoolClassStats& a, const PoolClassStats& b) {
  return a.network == b.network && a.class_bytes == b.class_bytes && a.in_use == b.in_use &&
         a.free == b.free && a.provided == b.provided && a.grown == b.grown &&
         a.bytes_registered == b.bytes_registered;
}

bool SameClasses(const std::vector<PoolClassStats>& a, const std::vector<PoolClassStats>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), SameClass);
}

// True once the daemon holds exactly `expected` as the report of `process`.
bool Holds(DirectoryClient& client, Gid process, const std::vector<PoolClassStats>& expected) {
  auto reports = client.PoolStats(process);
  return reports.ok() && reports->size() == 1 && (*reports)[0].process == process &&
         SameClasses((*reports)[0].classes, expected);
}

pb::EnrollRequest RawReport(size_t classes, const std::string& network, uint64_t in_use) {
  pb::EnrollRequest request;
  for (size_t i = 0; i < classes; ++i) {
    pb::PoolClassStats* stats = request.mutable_pool_stats()->add_classes();
    stats->set_network(network);
    stats->set_class_bytes(uint64_t{256} << (i % 13));
    stats->set_in_use(in_use);
  }
  return request;
}

TEST_CASE("a reported snapshot is returned by process and among all, and the next one replaces it",
          "[pool][integration]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  auto first = REQUIRE_VALUE(client->Enroll(ProcessNamed("first")));
  auto second = REQUIRE_VALUE(client->Enroll(ProcessNamed("second")));

  const auto before = std::chrono::system_clock::now();
  const std::vector<PoolClassStats> report = {Class("shm", 256, 3), Class("tcp", 65536, 10)};
  REQUIRE_OK(first->ReportPoolStats(report));
  REQUIRE(WaitUntil([&] { return Holds(*client, first->gid(), report); }, seconds(10)));
  const auto reported_at = REQUIRE_VALUE(client->PoolStats(first->gid()))[0].reported_at;
  CHECK(reported_at >= before - seconds(1));
  CHECK(reported_at <= std::chrono::system_clock::now() + seconds(1));

  // Enrolled, but silent so far.
  auto silent = client->PoolStats(second->gid());
  REQUIRE(silent.status().code() == StatusCode::kNotFound);
  CHECK(silent.status().message() ==
        "process " + second->gid().ToString() + " has not reported pool statistics yet");
  auto all = REQUIRE_VALUE(client->PoolStats());
  REQUIRE(all.size() == 1);
  CHECK(all[0].process == first->gid());

  // An empty report is a report: a process with no pools yet.
  REQUIRE_OK(second->ReportPoolStats({}));
  REQUIRE(WaitUntil([&] { return Holds(*client, second->gid(), {}); }, seconds(10)));
  all = REQUIRE_VALUE(client->PoolStats());
  REQUIRE(all.size() == 2);
  CHECK(all[0].process == first->gid());  // in Gid order
  CHECK(all[1].process == second->gid());
  CHECK(SameClasses(all[0].classes, report));

  const std::vector<PoolClassStats> next = {Class("shm", 1024, 40)};
  REQUIRE_OK(first->ReportPoolStats(next));
  REQUIRE(WaitUntil([&] { return Holds(*client, first->gid(), next); }, seconds(10)));
  CHECK_OK(first->Close());
  CHECK_OK(second->Close());
}

TEST_CASE("pool statistics vanish when the process leaves or its stream breaks",
          "[pool][integration]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  auto session = REQUIRE_VALUE(client->Enroll(ProcessNamed("leaver")));
  const Gid gid = session->gid();
  const std::vector<PoolClassStats> report = {Class("shm", 4096, 1)};
  REQUIRE_OK(session->ReportPoolStats(report));
  REQUIRE(WaitUntil([&] { return Holds(*client, gid, report); }, seconds(10)));

  REQUIRE_OK(session->Close("done"));
  CHECK(session->ReportPoolStats(report).code() == StatusCode::kFailedPrecondition);
  Status gone;
  CHECK(WaitUntil(
      [&] {
        gone = client->PoolStats(gid).status();
        return gone.message() == "process " + gid.ToString() + " has exited";
      },
      seconds(10)));
  CHECK(gone.code() == StatusCode::kNotFound);
  CHECK(REQUIRE_VALUE(client->PoolStats()).empty());

  // A stream that just breaks (the process died).
  auto stub = NewRawStub(daemon.address());
  EnrollAttempt raw = RawEnroll(*stub, MakeRegister("dies"));
  REQUIRE(raw.status.ok());
  const Gid raw_gid = raw.enrollment->gid();
  REQUIRE(raw.enrollment->Send(RawReport(2, "tcp", 5)));
  REQUIRE(WaitUntil([&] { return client->PoolStats(raw_gid).ok(); }, seconds(10)));
  raw.enrollment.reset();  // cancels the stream
  CHECK(WaitUntil(
      [&] {
        auto all = client->PoolStats();
        return all.ok() && all->empty();
      },
      seconds(10)));
  CHECK(client->PoolStats(raw_gid).status().code() == StatusCode::kNotFound);
}

TEST_CASE("pool statistics of an unknown process are not found, of a non-process invalid",
          "[pool][integration]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  auto unknown = client->PoolStats(Gid::Process(1, 999));
  CHECK(unknown.status().code() == StatusCode::kNotFound);
  CHECK(unknown.status().message() == "no process h1.p999");
  auto other_host = client->PoolStats(Gid::Process(7, 1));
  CHECK(other_host.status().code() == StatusCode::kNotFound);
  CHECK(other_host.status().message() == "no process h7.p1");
  CHECK(client->PoolStats(Gid::Host(1)).status().code() == StatusCode::kInvalidArgument);
  CHECK(client->PoolStats(Gid::Thread(1, 1, 1)).status().code() == StatusCode::kInvalidArgument);
  // Nobody has reported: an empty list, not an error.
  CHECK(REQUIRE_VALUE(client->PoolStats()).empty());
}

TEST_CASE("ReportPoolStats refuses a report over the limits before sending it",
          "[pool][integration]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  auto session = REQUIRE_VALUE(client->Enroll(ProcessNamed("limits")));

  std::vector<PoolClassStats> most(kMaxPoolClassesPerReport, Class("shm", 256, 1));
  CHECK_OK(session->ReportPoolStats(most));
  std::vector<PoolClassStats> too_many(kMaxPoolClassesPerReport + 1, Class("shm", 256, 1));
  CHECK(session->ReportPoolStats(too_many).code() == StatusCode::kInvalidArgument);
  using Report = std::vector<PoolClassStats>;
  const std::string longest(kMaxPoolNetworkBytes, 'n');
  CHECK(session->ReportPoolStats(Report{Class(longest + "n", 256, 1)}).code() ==
        StatusCode::kInvalidArgument);
  CHECK(session->ReportPoolStats(Report{Class("", 256, 1)}).code() == StatusCode::kInvalidArgument);
  CHECK_OK(session->ReportPoolStats(Report{Class(longest, 256, 1)}));
  CHECK(WaitUntil(
      [&] {
        auto reports = client->PoolStats(session->gid());
        return reports.ok() && (*reports)[0].classes.size() == 1 &&
               (*reports)[0].classes[0].network == longest;
      },
      seconds(10)));
  CHECK_OK(session->Close());
}

TEST_CASE("the daemon ignores an oversized report with one log line and keeps the stream",
          "[pool][integration]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  auto stub = NewRawStub(daemon.address());
  EnrollAttempt raw = RawEnroll(*stub, MakeRegister("oversized"));
  REQUIRE(raw.status.ok());
  const Gid gid = raw.enrollment->gid();
  const std::string prefix = "process " + gid.ToString() + ": pool statistics report ignored: ";
  auto logged = [&](const std::string& line) {
    return WaitUntil(
        [&] { return daemon.LogTail(1 << 20).find(prefix + line) != std::string::npos; },
        seconds(10));
  };
  auto holds_one_with = [&](uint64_t in_use) {
    pb::GetPoolStatsResponse response;
    return RawGetPoolStats(*stub, gid.raw(), &response).ok() && response.processes_size() == 1 &&
           response.processes(0).classes_size() == 1 &&
           response.processes(0).classes(0).in_use() == in_use;
  };

  REQUIRE(raw.enrollment->Send(RawReport(1, "shm", 1)));
  REQUIRE(WaitUntil([&] { return holds_one_with(1); }, seconds(10)));

  // Reports are handled in order: once the line is logged, the report is done.
  REQUIRE(raw.enrollment->Send(RawReport(1000, "shm", 2)));
  CHECK(logged("1000 classes (at most 64)"));
  CHECK(holds_one_with(1));
  REQUIRE(raw.enrollment->Send(RawReport(1, std::string(33, 'x'), 3)));
  CHECK(logged("a network name of 33 bytes (1 to 32)"));
  CHECK(holds_one_with(1));
  REQUIRE(raw.enrollment->Send(RawReport(1, "", 4)));
  CHECK(logged("a network name of 0 bytes (1 to 32)"));
  CHECK(holds_one_with(1));

  // A kind of message this daemon does not know (none set) is ignored too.
  REQUIRE(raw.enrollment->Send(pb::EnrollRequest()));

  // The stream is still up: the next report counts and the process runs.
  REQUIRE(raw.enrollment->Send(RawReport(1, "tcp", 5)));
  CHECK(WaitUntil([&] { return holds_one_with(5); }, seconds(10)));
  CHECK(REQUIRE_VALUE(client->Lookup(gid)).state == EntityState::kRunning);
  CHECK(raw.enrollment->Goodbye().ok());
}

TEST_CASE("ReportPoolStats from many threads races Close safely", "[pool][integration]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  auto session = REQUIRE_VALUE(client->Enroll(ProcessNamed("busy")));
  const Gid gid = session->gid();

  constexpr int kThreads = 4;
  std::atomic<uint64_t> sent{0};
  std::atomic<int> unexpected{0};
  std::vector<std::thread> reporters;
  for (int t = 0; t < kThreads; ++t) {
    reporters.emplace_back([&, t] {
      const std::vector<PoolClassStats> report = {Class("shm", 256, static_cast<uint64_t>(t))};
      // Bounded, in case Close never took effect (the test then fails below).
      for (int i = 0; i < 1'000'000; ++i) {
        Status status = session->ReportPoolStats(report);
        if (status.code() == StatusCode::kFailedPrecondition) return;  // closed
        if (status.ok()) {
          sent.fetch_add(1, std::memory_order_relaxed);
        } else {
          unexpected.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  }
  CHECK(WaitUntil([&] { return sent.load() >= 200; }, seconds(20)));
  CHECK(WaitUntil([&] { return client->PoolStats(gid).ok(); }, seconds(10)));
  CHECK_OK(session->Close("done"));
  for (std::thread& reporter : reporters) reporter.join();
  CHECK(unexpected.load() == 0);
  CHECK(WaitUntil(
      [&] {
        auto process = client->Lookup(gid);
        return process.ok() && process->state == EntityState::kExited &&
               process->exit_reason == "done";
      },
      seconds(10)));
}

TEST_CASE("a session reports again once it has re-enrolled after a daemon restart",
          "[pool][integration]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  auto session = REQUIRE_VALUE(client->Enroll(ProcessNamed("survivor")));
  const Gid gid = session->gid();
  const std::vector<PoolClassStats> report = {Class("shm", 256, 1)};
  REQUIRE_OK(session->ReportPoolStats(report));
  REQUIRE(WaitUntil([&] { return Holds(*client, gid, report); }, seconds(10)));

  REQUIRE(daemon.Stop().value_or(-1) == 0);
  CHECK(
      WaitUntil([&] { return session->ReportPoolStats(report).code() == StatusCode::kUnavailable; },
                seconds(10)));
  REQUIRE_OK(daemon.Restart());
  auto fresh = REQUIRE_VALUE(daemon.Connect());
  // The snapshot lived in the old daemon's memory only.
  CHECK(fresh->PoolStats(gid).status().code() == StatusCode::kNotFound);
  const std::vector<PoolClassStats> next = {Class("tcp", 8192, 2)};
  CHECK(WaitUntil([&] { return session->ReportPoolStats(next).ok() && Holds(*fresh, gid, next); },
                  seconds(20), milliseconds(50)));
  // The watcher thread counts the re-enroll after the stream is usable.
  CHECK(WaitUntil([&] { return session->reenroll_count() == 1; }, seconds(5)));
  CHECK(session->reenroll_count() == 1);
  CHECK_OK(session->Close());
}

}  // namespace
}  // namespace tocl::testing
