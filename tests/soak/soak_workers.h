// The soak's tocl-soak-worker processes, one per host of a netns cluster,
// from the test's side: starting them (host h streams to host h % hosts + 1),
// killing one and starting its successor, reading their "stat" lines, and
// stopping them all at the end. Every process ever started is kept, so the
// lines a killed worker printed before it died are still read at the end.
// No Catch2 here.
//
//   SoakWorkers workers(cluster, {.threads = 2, .seed = 7});
//   TOCL_RETURN_IF_ERROR(workers.StartAll());
//   TOCL_RETURN_IF_ERROR(workers.Kill(2));   // SIGKILL host 2's worker
//   TOCL_RETURN_IF_ERROR(workers.Start(2));  // and its successor (new Gids)
//
// Threading: one owner thread (the cluster's).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "netns_cluster.h"
#include "worker_lines.h"

namespace tocl::testing {

struct SoakWorkerSettings {
  int threads = 2;
  uint64_t seed = 1;
  uint32_t rate = 0;  // messages a second per sending thread; 0: no limit
  std::chrono::milliseconds stats_interval{2000};
  std::chrono::milliseconds stall_timeout{15000};
  std::chrono::milliseconds drain_timeout{30000};
  // Where each worker keeps its records (soak_worker.cc): <dir>/<label>.send
  // and .recv; none when empty.
  std::string records_dir;
};

// One worker process: which host, the how-manieth there, and whether the
// test killed it.
struct SoakIncarnation {
  int host = 0;
  int number = 0;  // 1 for the first worker of its host
  std::chrono::steady_clock::time_point started;
  bool killed = false;
  std::unique_ptr<LongWorker> worker;
  std::string records;  // its record files' path without .send / .recv ("" without)

  std::string Label() const;  // "h2#3"
};

class SoakWorkers {
 public:
  SoakWorkers(NetnsCluster& cluster, SoakWorkerSettings settings);

  // Starts the first worker of every host; then every one of them.
  Status StartAll();
  // Starts a worker on `host` (after Kill) and waits until it is ready.
  Status Start(int host);
  // SIGKILLs the host's current worker and reaps it.
  Status Kill(int host);
  bool Running(int host) const;
  // The host's current worker (started by Start, not killed).
  SoakIncarnation& Current(int host);
  const std::vector<std::unique_ptr<SoakIncarnation>>& All() const { return all_; }
  // What the test found out about the workers when they stopped moving
  // (their stacks), saved with their logs.
  const std::string& stacks() const { return stacks_; }
  void set_stacks(std::string stacks) { stacks_ = std::move(stacks); }

  // The last "stat" line of each thread of the host's current worker, by
  // thread index ({} when it has printed none yet).
  std::map<int, WorkerEvent> LatestStats(int host) const;

  // The stop signal (SIGUSR1) to every current worker, then waits up to
  // `timeout` (in all) for them to exit: the error names those that did not, or
  // exited with a failure, with their last lines.
  Status StopAll(std::chrono::milliseconds timeout);

 private:
  NetnsCluster& cluster_;
  const SoakWorkerSettings settings_;
  std::vector<std::unique_ptr<SoakIncarnation>> all_;
  std::map<int, SoakIncarnation*> current_;  // by host
  std::string stacks_;
};

// The last `lines` lines of `text`.
std::string LastLines(const std::string& text, size_t lines);

}  // namespace tocl::testing
