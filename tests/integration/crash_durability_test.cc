// kill -9 of toclsd during a storm of registrations: the database it leaves
// is sound and holds every registration that was acknowledged, and the
// restarted daemon serves them.
#include <atomic>
#include <bit>
#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "daemon_harness.h"
#include "database_file.h"
#include "status_assertions.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int kWriters = 4;
constexpr uint32_t kBatch = 50;
constexpr int kCycles = 3;

int64_t Stored(Gid gid) {
  return std::bit_cast<int64_t>(gid.raw());
}

// Registers batches of threads as fast as the daemon acknowledges them,
// keeping the gids of every acknowledged batch, until told to stop or a
// call fails.
struct Writer {
  ProcessSession* session = nullptr;
  std::vector<Gid> acknowledged;
  Status last_error;

  void Run(std::atomic<uint64_t>& acks, const std::atomic<bool>& stop) {
    const Gid process = session->gid();
    uint32_t next = 1;
    while (!stop.load(std::memory_order_relaxed)) {
      std::vector<ThreadInfo> batch(kBatch);
      for (ThreadInfo& thread : batch) {
        thread.gid = Gid::Thread(process, next++);
        thread.name = "storm-" + std::to_string(next);
        thread.attributes = {{"storm", "yes"}};
      }
      Status status = session->RegisterThreads(batch);
      if (!status.ok()) {
        last_error = status;
        return;
      }
      for (const ThreadInfo& thread : batch) acknowledged.push_back(thread.gid);
      acks.fetch_add(1, std::memory_order_release);
    }
  }
};

TEST_CASE("every registration acknowledged before a kill -9 of the daemon survives it",
          "[integration][crash]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  TempDir scratch("toclsd-crash-copy-");
  std::mt19937 random(std::random_device{}());
  std::vector<Gid> acknowledged;  // over all cycles

  for (int cycle = 0; cycle < kCycles; ++cycle) {
    INFO("cycle " << cycle);
    auto client = REQUIRE_VALUE(daemon.Connect());
    std::vector<std::unique_ptr<ProcessSession>> sessions;
    for (int w = 0; w < kWriters; ++w) {
      EnrollOptions options;
      options.name = "storm-" + std::to_string(cycle) + "-" + std::to_string(w);
      sessions.push_back(REQUIRE_VALUE(client->Enroll(options)));
    }

    std::vector<Writer> writers(kWriters);
    std::atomic<uint64_t> acks{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int w = 0; w < kWriters; ++w) {
      writers[w].session = sessions[w].get();
      threads.emplace_back([&, w] { writers[w].Run(acks, stop); });
    }
    // Kill mid-storm, after a random number of acknowledged batches (a few
    // hundred milliseconds' worth).
    const uint64_t target = std::uniform_int_distribution<uint64_t>(40, 200)(random);
    const bool reached =
        WaitUntil([&] { return acks.load() >= target; }, seconds(60), milliseconds(1));
    Status killed = daemon.Kill();
    stop = true;
    for (std::thread& thread : threads) thread.join();
    REQUIRE_OK(killed);
    INFO("acknowledged batches " << acks.load() << ", target " << target);
    REQUIRE(reached);
    // The kill came mid-storm: writers were cut off by it, not by `stop`.
    int cut_off = 0;
    for (const Writer& writer : writers) cut_off += writer.last_error.ok() ? 0 : 1;
    CHECK(cut_off >= 1);

    std::vector<Gid> this_cycle;
    for (const Writer& writer : writers) {
      this_cycle.insert(this_cycle.end(), writer.acknowledged.begin(), writer.acknowledged.end());
    }
    acknowledged.insert(acknowledged.end(), this_cycle.begin(), this_cycle.end());

    // The files the crashed daemon left, read by SQLite itself (on a copy,
    // so that the daemon does its own recovery on restart).
    {
      const std::string copy = REQUIRE_VALUE(CopyDatabase(daemon.db_path(), scratch.path()));
      auto db = REQUIRE_VALUE(DatabaseFile::Open(copy, /*read_only=*/false));
      CHECK(REQUIRE_VALUE(db.IntegrityCheck()) == "ok");
      const std::unordered_set<int64_t> stored = REQUIRE_VALUE(db.ThreadGids());
      size_t missing = 0;
      Gid first_missing;
      for (Gid gid : acknowledged) {
        if (!stored.contains(Stored(gid))) {
          if (missing++ == 0) first_missing = gid;
        }
      }
      INFO(missing << " of " << acknowledged.size() << " acknowledged threads missing, first "
                   << first_missing.ToString());
      CHECK(missing == 0);
    }

    // The restarted daemon serves every one of them.
    REQUIRE_OK(daemon.Restart());
    auto fresh = REQUIRE_VALUE(daemon.Connect());
    size_t not_found = 0;
    for (Gid gid : this_cycle) {
      auto entity = fresh->Lookup(gid);
      if (!entity.ok() || entity->kind != EntityKind::kThread ||
          entity->attributes.count("storm") != 1) {
        ++not_found;
      }
    }
    INFO(not_found << " of " << this_cycle.size() << " threads of this cycle not found by Lookup");
    CHECK(not_found == 0);
    auto integrity = REQUIRE_VALUE(DatabaseFile::Open(daemon.db_path()));
    CHECK(REQUIRE_VALUE(integrity.IntegrityCheck()) == "ok");
    // The sessions of this cycle re-enroll or leave; either way they go now.
  }
  CHECK(acknowledged.size() >= kCycles * 40 * kBatch);
  CHECK(daemon.Stop().value_or(-1) == 0);
}

}  // namespace
}  // namespace tocl::testing
