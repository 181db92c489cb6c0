#include "cluster/cluster_directory_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cluster/bench_cluster.h"
#include "netns_cluster.h"
#include "sightings.h"
#include "stats.h"
#include "tocl/directory_client.h"

namespace tocl::bench {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::seconds;
using testing::NetnsCluster;

constexpr int kHosts = 3;
constexpr int kRoles = 16;

double MicrosBetween(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::micro>(to - from).count();
}

// A Watch stream on one replica: when it first carried each gid ADDED.
struct Watcher {
  Sightings sightings;
  std::atomic<bool> stop{false};
  std::thread thread;
};

Status StartWatcher(DirectoryClient& client, Watcher& watcher) {
  TOCL_ASSIGN_OR_RETURN(uint64_t head, client.Ping());
  watcher.thread = std::thread([&client, &watcher, head] {
    Status status = client.Watch(
        head,
        [&](const ChangeEvent& event) {
          if (event.op == ChangeOp::kAdded && event.gid.is_thread()) {
            watcher.sightings.Seen(event.gid, Clock::now());
          }
          return true;
        },
        [&] { return watcher.stop.load(); });
    if (!status.ok()) fmt::print(stderr, "directory --cluster: watch: {}\n", status.ToString());
  });
  return Status::Ok();
}

// Registers `count` threads under `session`'s process in batches, with the
// attributes the query cases select on.
Status RegisterMany(ProcessSession& session, uint64_t count, uint32_t batch) {
  std::vector<ThreadInfo> threads;
  for (uint64_t i = 1; i <= count; i += batch) {
    threads.clear();
    for (uint64_t t = i; t < i + batch && t <= count; ++t) {
      threads.push_back(
          {Gid::Thread(session.gid(), static_cast<uint32_t>(t)),
           fmt::format("w{}", t),
           {{"role", fmt::format("r{}", t % kRoles)}, {"shard", std::to_string(t % 100)}}});
    }
    TOCL_RETURN_IF_ERROR(session.RegisterThreads(threads));
  }
  return Status::Ok();
}

template <typename Call>
Result<std::vector<double>> TimeCalls(int calls, Call call) {
  std::vector<double> samples;
  for (int i = 0; i < calls; ++i) {
    const auto start = Clock::now();
    TOCL_RETURN_IF_ERROR(call());
    samples.push_back(MicrosBetween(start, Clock::now()));
  }
  return samples;
}

struct Comparison {
  std::vector<double> measured, baseline, ratios;
};

}  // namespace

Status RunClusterDirectoryBench(const ClusterDirectoryBenchOptions& options, Report& report) {
  TOCL_ASSIGN_OR_RETURN(auto cluster,
                        StartBenchCluster("directory --cluster", kHosts, options.toclsd_path));
  if (cluster == nullptr) return Status::Ok();

  std::vector<std::unique_ptr<DirectoryClient>> clients;
  for (int h = 1; h <= kHosts; ++h) {
    TOCL_ASSIGN_OR_RETURN(auto client, DirectoryClient::Connect(cluster->DaemonSocket(h)));
    clients.push_back(std::move(client));
  }
  const int rounds = std::max(5, options.repeats);

  // --- propagation: a registration on h1 until the watch streams of h2
  // and h3 carry it (their rows are committed then: a query sees them).
  Watcher watchers[2];
  for (int i = 0; i < 2; ++i) TOCL_RETURN_IF_ERROR(StartWatcher(*clients[i + 1], watchers[i]));
  EnrollOptions probe_options;
  probe_options.name = "propagation-probe";
  TOCL_ASSIGN_OR_RETURN(auto probe, clients[0]->Enroll(probe_options));
  std::vector<double> after_return, after_call, call, round_p99;
  uint32_t next_thread = 1;
  Status propagation_status;
  for (int round = 0; round < rounds && propagation_status.ok(); ++round) {
    std::vector<double> round_samples;
    for (int i = 0; i < options.propagation_samples; ++i) {
      const Gid gid = Gid::Thread(probe->gid(), next_thread++);
      const ThreadInfo thread{gid, "probe", {}};
      const auto start = Clock::now();
      propagation_status = probe->RegisterThreads(std::span(&thread, 1));
      if (!propagation_status.ok()) break;
      const auto returned = Clock::now();
      for (Watcher& watcher : watchers) {
        auto seen = watcher.sightings.WaitFor(gid, returned + seconds(10));
        if (!seen) {
          propagation_status = DeadlineExceeded(
              fmt::format("{} registered on h1 was not seen on a replica in 10 s", gid.ToString()));
          break;
        }
        after_return.push_back(MicrosBetween(returned, *seen));
        after_call.push_back(MicrosBetween(start, *seen));
        round_samples.push_back(MicrosBetween(start, *seen));
      }
      call.push_back(MicrosBetween(start, returned));
    }
    round_p99.push_back(Percentile(round_samples, 99));
  }
  for (Watcher& watcher : watchers) {
    watcher.stop = true;
    // The watch loop checks `stop` between events: one more registration ends it.
  }
  {
    const ThreadInfo last{Gid::Thread(probe->gid(), next_thread++), "probe", {}};
    (void)probe->RegisterThreads(std::span(&last, 1));
  }
  for (Watcher& watcher : watchers) watcher.thread.join();
  TOCL_RETURN_IF_ERROR(propagation_status);
  const Summary from_call = Summarize(after_call);
  report.Add("propagation h1 -> h2, h3 (from the call)", "p50", from_call.p50 / 1000, "ms")
      .WithBaseline(Median(call) / 1000)
      .WithRatio(Median(call) > 0 ? from_call.p50 / Median(call) : 0)
      .WithNote(fmt::format("{} registrations x 2 replicas; baseline: the registration call "
                            "(durable on h1)",
                            after_call.size() / 2));
  report.Add("propagation h1 -> h2, h3 (from the call)", "p99", from_call.p99 / 1000, "ms")
      .WithTarget({Target::Bound::kAtMost, 50, Target::Applies::kValue})
      .WithNote(fmt::format("worst round p99 {:.1f} ms", Max(round_p99) / 1000));
  report.Add("propagation h1 -> h2, h3 (after it returned)", "p50", Median(after_return) / 1000,
             "ms");

  // --- a million threads, registered on all hosts at once, replicated.
  const uint64_t per_host = options.threads / kHosts;
  std::vector<std::unique_ptr<ProcessSession>> sessions;
  for (int h = 1; h <= kHosts; ++h) {
    EnrollOptions filler;
    filler.name = fmt::format("filler-h{}", h);
    TOCL_ASSIGN_OR_RETURN(auto session, clients[h - 1]->Enroll(filler));
    sessions.push_back(std::move(session));
  }
  fmt::print(stderr, "directory --cluster: registering {} threads on each of {} hosts\n", per_host,
             kHosts);
  const auto fill_start = Clock::now();
  std::vector<Status> fill_status(kHosts);
  {
    std::vector<std::thread> fillers;
    for (int h = 0; h < kHosts; ++h) {
      fillers.emplace_back(
          [&, h] { fill_status[h] = RegisterMany(*sessions[h], per_host, options.batch); });
    }
    for (std::thread& filler : fillers) filler.join();
  }
  for (const Status& status : fill_status) TOCL_RETURN_IF_ERROR(status);
  const auto registered = Clock::now();
  // Replicated when every daemon has every host's last thread.
  for (int h = 0; h < kHosts; ++h) {
    const Gid last = Gid::Thread(sessions[h]->gid(), static_cast<uint32_t>(per_host));
    for (auto& client : clients) {
      const bool seen = testing::WaitUntil([&] { return client->Lookup(last).ok(); }, seconds(900));
      if (!seen) return DeadlineExceeded(fmt::format("{} never replicated", last.ToString()));
    }
  }
  const auto replicated = Clock::now();
  report
      .Add(fmt::format("{} threads on {} hosts: registered", per_host * kHosts, kHosts), "rate",
           static_cast<double>(per_host * kHosts) /
               std::chrono::duration<double>(registered - fill_start).count(),
           "threads/s")
      .WithNote("each daemon writes its own rows and applies the two others' replicas");
  report.Add(
      fmt::format("{} threads on {} hosts: replicated everywhere", per_host * kHosts, kHosts),
      "time after the last registration",
      std::chrono::duration<double>(replicated - registered).count(), "s");

  // --- reads on a replica (h1 reading h3's rows) vs on their owner (h3).
  const std::string query = "kind=thread and role=r7 and host=h3";
  const Gid remote_thread = Gid::Thread(sessions[2]->gid(), static_cast<uint32_t>(per_host / 2));
  Comparison lookups, queries;
  for (int round = 0; round < rounds; ++round) {
    const bool replica_first = round % 2 == 0;
    std::vector<double> replica, origin;
    for (int turn = 0; turn < 2; ++turn) {
      DirectoryClient& client = (turn == 0) == replica_first ? *clients[0] : *clients[2];
      TOCL_ASSIGN_OR_RETURN(std::vector<double> samples,
                            TimeCalls(options.query_calls, [&]() -> Status {
                              auto page = client.Query(query, 100);
                              if (!page.ok()) return page.status();
                              if (page->entities.size() != 100) {
                                return Internal(fmt::format("{} entities", page->entities.size()));
                              }
                              return Status::Ok();
                            }));
      ((turn == 0) == replica_first ? replica : origin) = std::move(samples);
    }
    queries.measured.push_back(Median(replica));
    queries.baseline.push_back(Median(origin));
    queries.ratios.push_back(Median(replica) / Median(origin));
    std::vector<double> replica_lookup, origin_lookup;
    TOCL_ASSIGN_OR_RETURN(replica_lookup, TimeCalls(options.query_calls * 5, [&] {
                            return clients[0]->Lookup(remote_thread).status();
                          }));
    TOCL_ASSIGN_OR_RETURN(origin_lookup, TimeCalls(options.query_calls * 5, [&] {
                            return clients[2]->Lookup(remote_thread).status();
                          }));
    lookups.measured.push_back(Median(replica_lookup));
    lookups.baseline.push_back(Median(origin_lookup));
    lookups.ratios.push_back(Median(replica_lookup) / Median(origin_lookup));
  }
  report
      .Add(fmt::format("query '{}' limit 100 on replica h1", query), "p50, median of rounds",
           Median(queries.measured), "us")
      .WithBaseline(Median(queries.baseline))
      .WithRatio(Median(queries.ratios))
      .WithNote(fmt::format("baseline: the same query on h3, which owns the rows; ratio min {:.2f}",
                            Min(queries.ratios)));
  report
      .Add("lookup of an h3 thread on replica h1", "p50, median of rounds",
           Median(lookups.measured), "us")
      .WithBaseline(Median(lookups.baseline))
      .WithRatio(Median(lookups.ratios))
      .WithNote(
          fmt::format("baseline: the same lookup on h3; ratio min {:.2f}", Min(lookups.ratios)));
  for (auto& session : sessions) (void)session->Close();
  (void)probe->Close();
  return Status::Ok();
}

}  // namespace tocl::bench
