#include "cluster/spawn_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "cluster/bench_cluster.h"
#include "netns_cluster.h"
#include "stats.h"
#include "worker_lines.h"

#ifndef TOCL_CLUSTER_WORKER_PATH
#define TOCL_CLUSTER_WORKER_PATH "tocl-cluster-worker"
#endif

namespace tocl::bench {
namespace {

using std::chrono::seconds;
using testing::LongWorker;
using testing::NetnsCluster;
using testing::ParseWorkerEvents;

const std::string kWorker = TOCL_CLUSTER_WORKER_PATH;
constexpr int kSpawner = 1;
constexpr int kTarget = 2;
// The first samples of a driver run warm its connections and caches.
constexpr size_t kWarmup = 5;

// Runs a driver on `host` and returns the `key` field of its `event` lines
// (microseconds), the warm-up ones dropped.
Result<std::vector<double>> Samples(NetnsCluster& cluster, int host, std::vector<std::string> args,
                                    const std::string& event, const std::string& key) {
  args.insert(args.begin(), kWorker);
  TOCL_ASSIGN_OR_RETURN(std::string output, cluster.Exec(host, args, seconds(300)));
  std::vector<double> samples;
  for (const auto& line : ParseWorkerEvents(output, event)) {
    samples.push_back(static_cast<double>(line.Number(key)));
  }
  if (samples.size() <= kWarmup) {
    return Internal(
        fmt::format("{} printed {} '{}' lines:\n{}", args[1], samples.size(), event, output));
  }
  samples.erase(samples.begin(), samples.begin() + kWarmup);
  return samples;
}

// Runs the baseline and the measured case of a round, in the given order.
template <typename Baseline, typename Measured>
Status Interleaved(bool baseline_first, Baseline& baseline, Measured& measured) {
  TOCL_RETURN_IF_ERROR(baseline_first ? baseline() : measured());
  return baseline_first ? measured() : baseline();
}

struct Pair {
  std::vector<double> measured_p50, baseline_p50, measured_p99, ratios;
};

void Record(Pair& pair, const std::vector<double>& measured, const std::vector<double>& baseline) {
  const double m = Median(measured), b = Median(baseline);
  pair.measured_p50.push_back(m);
  pair.baseline_p50.push_back(b);
  pair.measured_p99.push_back(Percentile(measured, 99));
  pair.ratios.push_back(b > 0 ? m / b : 0);
}

std::string RoundsNote(const Pair& pair, size_t samples, const std::string& baseline) {
  return fmt::format("{} rounds x {} samples, interleaved with {}; ratio min {:.2f}",
                     pair.ratios.size(), samples, baseline, Min(pair.ratios));
}

}  // namespace

Status RunSpawnBench(const SpawnBenchOptions& options, Report& report) {
  TOCL_ASSIGN_OR_RETURN(auto cluster, StartBenchCluster("spawn", 2, options.toclsd_path));
  if (cluster == nullptr) return Status::Ok();

  TOCL_ASSIGN_OR_RETURN(LongWorker target,
                        LongWorker::StartProgram(*cluster, kTarget, kWorker, {"serve"}, "ready"));
  const std::string target_thread = target.gids().at(0).ToString();
  const std::string target_process = target.gids().at(0).process().ToString();

  const int rounds = std::max(5, options.repeats);
  const int thread_count = options.quick ? 30 : 200;
  const int process_count = options.quick ? 8 : 25;

  Pair threads, processes;
  for (int round = 0; round < rounds; ++round) {
    const bool baseline_first = round % 2 == 0;
    std::vector<double> ping, spawn;
    auto run_ping = [&]() -> Status {
      TOCL_ASSIGN_OR_RETURN(
          ping, Samples(*cluster, kSpawner,
                        {"ping", "--to", target_thread, "--count", std::to_string(thread_count)},
                        "pong", "us"));
      return Status::Ok();
    };
    auto run_spawn = [&]() -> Status {
      TOCL_ASSIGN_OR_RETURN(spawn, Samples(*cluster, kSpawner,
                                           {"spawn-thread", "--process", target_process, "--count",
                                            std::to_string(thread_count)},
                                           "thread", "us"));
      return Status::Ok();
    };
    TOCL_RETURN_IF_ERROR(Interleaved(baseline_first, run_ping, run_spawn));
    Record(threads, spawn, ping);
    fmt::print(stderr, "spawn: round {} threads p50 {:.0f} us (round trip {:.0f} us)\n", round,
               Median(spawn), Median(ping));

    std::vector<double> exec, process;
    auto run_exec = [&]() -> Status {
      TOCL_ASSIGN_OR_RETURN(
          exec, Samples(*cluster, kTarget,
                        {"exec", "--program", kWorker, "--count", std::to_string(process_count)},
                        "exec", "us"));
      return Status::Ok();
    };
    auto run_process = [&]() -> Status {
      TOCL_ASSIGN_OR_RETURN(
          process, Samples(*cluster, kSpawner,
                           {"spawn-process", "--host", std::to_string(kTarget), "--program",
                            kWorker, "--count", std::to_string(process_count)},
                           "spawned", "us"));
      return Status::Ok();
    };
    TOCL_RETURN_IF_ERROR(Interleaved(baseline_first, run_exec, run_process));
    Record(processes, process, exec);
    fmt::print(stderr, "spawn: round {} processes p50 {:.1f} ms (exec {:.1f} ms)\n", round,
               Median(process) / 1000, Median(exec) / 1000);
  }

  report
      .Add("remote thread spawn (h1 -> h2)", "p50, median of rounds", Median(threads.measured_p50),
           "us")
      .WithBaseline(Median(threads.baseline_p50))
      .WithRatio(Median(threads.ratios))
      .WithTarget({Target::Bound::kAtMost, 200, Target::Applies::kValue})
      .WithNote(RoundsNote(threads, static_cast<size_t>(thread_count) - kWarmup,
                           "a tocl message round trip between the same processes"));
  report.Add("remote thread spawn (h1 -> h2)", "p99, median of rounds",
             Median(threads.measured_p99), "us");
  report
      .Add("remote process spawn to enrolled (h1 -> h2)", "p50, median of rounds",
           Median(processes.measured_p50) / 1000, "ms")
      .WithBaseline(Median(processes.baseline_p50) / 1000)
      .WithRatio(Median(processes.ratios))
      .WithTarget({Target::Bound::kAtMost, 20, Target::Applies::kValue})
      .WithNote(RoundsNote(processes, static_cast<size_t>(process_count) - kWarmup,
                           "posix_spawn + wait of the same program on h2 without tocl"));
  report.Add("remote process spawn to enrolled (h1 -> h2)", "p99, median of rounds",
             Median(processes.measured_p99) / 1000, "ms");
  return Status::Ok();
}

}  // namespace tocl::bench
