#include "notify/notify_bench.h"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"
#include "cluster/bench_cluster.h"
#include "daemon_process.h"
#include "load_average.h"
#include "netns_cluster.h"
#include "notify/exit_observers.h"
#include "stats.h"
#include "worker_lines.h"

#ifndef TOCL_CLUSTER_WORKER_PATH
#define TOCL_CLUSTER_WORKER_PATH "tocl-cluster-worker"
#endif

namespace tocl::bench {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::ChildProcess;
using testing::LongWorker;
using testing::NetnsCluster;

// `tocl-cluster-worker serve` is the target: a process with a runtime and
// one enrolled thread, idle in Recv until it is killed.
const std::string kWorker = TOCL_CLUSTER_WORKER_PATH;
// The tag on which a spawned `serve` says hello to its spawner.
constexpr Tag kHelloTag = 1;
// Longest wait for any observer after a kill (a miss ends the run).
constexpr auto kObserveTimeout = seconds(10);
// A random pause before each kill, so that kills do not keep one phase
// against a periodic timer anywhere (a tick would otherwise look like a
// constant delay, or like none).
constexpr int kMaxJitterMs = 50;
constexpr const char* kCallback = "callback";
constexpr const char* kMessage = "message to a thread in RecvFor";
// The remote host of --cluster and the watcher's.
constexpr int kWatcherHost = 1;
constexpr int kTargetHost = 2;

// A process to kill, and what owns (and reaps) it.
struct TargetProcess {
  Gid gid;
  pid_t pid = -1;
  std::optional<ChildProcess> child;  // started by the benchmark on this host
  std::optional<LongWorker> worker;   // started in a cluster host
};

// How the benchmark's processes find each other for one setup.
struct Setup {
  std::string name;                // "one host", "h2 -> h1"
  std::vector<std::string> kinds;  // the kinds of target, taking turns
  std::function<Result<TargetProcess>(size_t kind)> start;
  // The Watch streams, in report order; the last is the watcher's daemon
  // (the notices' baseline).
  std::vector<std::pair<std::string, DirectoryWatch*>> watches;
  // The exit time the first watch's daemon wrote in the entry.
  std::string recorded_name;
  NoticeWatcher* watcher = nullptr;
  bool local = true;  // the target on the watcher's host: the 10 ms target applies
};

// One observer's latencies (us) for one kind of target.
struct Latencies {
  std::vector<double> all;
  std::vector<double> round_p50;
  std::vector<double> this_round;

  void EndRound() {
    round_p50.push_back(Median(this_round));
    all.insert(all.end(), this_round.begin(), this_round.end());
    this_round.clear();
  }
};

double MicrosBetween(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::micro>(to - from).count();
}

// `serve` started by the benchmark, enrolled with the daemon at `address`.
Result<TargetProcess> StartEnrolled(const std::string& address) {
  testing::SpawnOptions spawn;
  spawn.env = {"TOCL_DAEMON=" + address, "TOCL_NETWORKS=shm"};
  TOCL_ASSIGN_OR_RETURN(ChildProcess child, ChildProcess::Spawn({kWorker, "serve"}, spawn));
  const bool ready = testing::WaitUntil(
      [&] {
        return !testing::ParseWorkerEvents(child.Output(), "ready").empty() || !child.running();
      },
      seconds(30), milliseconds(1));
  const std::string output = child.Output();
  if (!ready || testing::ParseWorkerEvents(output, "ready").empty()) {
    return Unavailable(fmt::format("tocl-cluster-worker serve did not get ready:\n{}", output));
  }
  auto started = testing::ParseWorkerEvents(output, "started");
  TOCL_ASSIGN_OR_RETURN(Gid thread, Gid::Parse(started.at(0).Field("gid")));
  TargetProcess target;
  target.gid = thread.process();
  target.pid = child.pid();
  target.child = std::move(child);
  return target;
}

// `serve` spawned by the watcher's daemon (which reaps it: its exit is seen
// through a pidfd there, not only as the end of its enroll stream).
Result<TargetProcess> StartSpawned(NoticeWatcher& watcher) {
  SpawnOptions spawn;
  spawn.executable = kWorker;
  spawn.args = {"serve"};
  spawn.env = {"TOCL_NETWORKS=shm"};
  TOCL_ASSIGN_OR_RETURN(SpawnedProcess spawned,
                        watcher.runtime().SpawnProcess(watcher.caller(), spawn));
  // Ready once it said hello (its main thread receives then).
  TOCL_RETURN_IF_ERROR(
      watcher.runtime().RecvFor(watcher.caller(), seconds(30), spawned.gid, kHelloTag).status());
  TargetProcess target;
  target.gid = spawned.gid;
  target.pid = static_cast<pid_t>(spawned.os_pid);
  return target;
}

Result<TargetProcess> StartInHost(NetnsCluster& cluster, int host) {
  TOCL_ASSIGN_OR_RETURN(LongWorker worker,
                        LongWorker::StartProgram(cluster, host, kWorker, {"serve"}, "ready"));
  TargetProcess target;
  target.gid = worker.gids().at(0).process();
  target.pid = worker.pid();
  target.worker = std::move(worker);
  return target;
}

class NotifyRun {
 public:
  NotifyRun(const NotifyBenchOptions& options, Setup setup)
      : options_(options), setup_(std::move(setup)) {}

  Status Run(Report& report) {
    load_before_ = LoadAverage();
    const int rounds = std::max(5, options_.repeats);
    const int kills =
        std::max<int>(static_cast<int>(setup_.kinds.size()), options_.quick ? 6 : options_.kills);
    // One unrecorded kill of each kind warms every path.
    for (size_t kind = 0; kind < setup_.kinds.size(); ++kind) {
      TOCL_RETURN_IF_ERROR(KillOne(kind, kind % 2 == 0, /*record=*/false));
    }
    for (int round = 0; round < rounds; ++round) {
      for (int i = 0; i < kills; ++i) {
        const size_t kind = static_cast<size_t>(i) % setup_.kinds.size();
        // Which watch is made first alternates within and across rounds.
        TOCL_RETURN_IF_ERROR(KillOne(kind, (i / setup_.kinds.size() + round) % 2 == 0, true));
      }
      for (auto& [key, series] : series_) series.EndRound();
      PrintRound(round);
    }
    load_after_ = LoadAverage();
    Publish(report);
    return Status::Ok();
  }

 private:
  // Observers in report order: pidfd, the exit time in the entry, the Watch
  // streams, callback, message.
  std::vector<std::string> ObserverNames() const {
    std::vector<std::string> names = {"pidfd readable (kernel)", setup_.recorded_name};
    for (const auto& [name, watch] : setup_.watches) names.push_back(name);
    names.push_back(kCallback);
    names.push_back(kMessage);
    return names;
  }

  Status KillOne(size_t kind, bool callback_first, bool record) {
    TOCL_ASSIGN_OR_RETURN(TargetProcess target, setup_.start(kind));
    TOCL_RETURN_IF_ERROR(setup_.watcher->Arm(target.gid, callback_first));
    TOCL_ASSIGN_OR_RETURN(auto pidfd, PidfdWait::Start(target.pid, kObserveTimeout));
    std::this_thread::sleep_for(milliseconds(jitter_(random_)));

    const auto killed = Clock::now();
    if (::kill(target.pid, SIGKILL) != 0) {
      return Internal(fmt::format("kill -9 {} ({}) failed", target.pid, target.gid.ToString()));
    }
    const auto deadline = killed + kObserveTimeout;
    std::vector<Clock::time_point> seen;
    auto wait = [&](Sightings& sightings, const std::string& what) -> Status {
      auto at = sightings.WaitFor(target.gid, deadline);
      if (!at) {
        return DeadlineExceeded(fmt::format("{}: nothing for {} within {} s of kill -9", what,
                                            target.gid.ToString(), kObserveTimeout.count()));
      }
      seen.push_back(*at);
      return Status::Ok();
    };
    TOCL_ASSIGN_OR_RETURN(Clock::time_point gone, pidfd->Join());
    seen.push_back(gone);
    TOCL_RETURN_IF_ERROR(wait(setup_.watches.front().second->recorded(), setup_.recorded_name));
    for (const auto& [name, watch] : setup_.watches) {
      TOCL_RETURN_IF_ERROR(wait(watch->exited(), name));
    }
    TOCL_RETURN_IF_ERROR(wait(setup_.watcher->callbacks(), kCallback));
    TOCL_RETURN_IF_ERROR(wait(setup_.watcher->messages(), kMessage));
    if (target.child) (void)target.child->Wait(kObserveTimeout);
    if (target.worker) (void)target.worker->Wait(kObserveTimeout);
    if (!record) return Status::Ok();

    const std::vector<std::string> names = ObserverNames();
    const Clock::time_point baseline = seen[seen.size() - 3];  // the watcher's daemon
    for (size_t i = 0; i < seen.size(); ++i) {
      series_[{kind, names[i]}].this_round.push_back(MicrosBetween(killed, seen[i]));
    }
    // What the runtime adds to what its daemon's directory showed.
    series_[{kind, Beyond(kCallback)}].this_round.push_back(
        MicrosBetween(baseline, seen[seen.size() - 2]));
    series_[{kind, Beyond(kMessage)}].this_round.push_back(MicrosBetween(baseline, seen.back()));
    return Status::Ok();
  }

  void PrintRound(int round) {
    std::string line = fmt::format("notify {}: round {}", setup_.name, round);
    for (size_t kind = 0; kind < setup_.kinds.size(); ++kind) {
      line += fmt::format(
          " | {}: pidfd {:.2f} ms, watch {:.2f} ms, callback {:.2f} ms, message "
          "{:.2f} ms",
          setup_.kinds[kind], RoundP50(kind, ObserverNames().front()) / 1000,
          RoundP50(kind, setup_.watches.back().first) / 1000, RoundP50(kind, kCallback) / 1000,
          RoundP50(kind, kMessage) / 1000);
    }
    fmt::print(stderr, "{} (p50)\n", line);
  }

  // The series of a notice's time after the watcher's-daemon Watch.
  static std::string Beyond(const std::string& form) { return form + ", beyond the Watch"; }

  // This round's p50 (us) of one observer.
  double RoundP50(size_t kind, const std::string& name) {
    return series_[{kind, name}].round_p50.back();
  }

  void Publish(Report& report) {
    const std::vector<std::string> names = ObserverNames();
    const std::string& watcher_daemon = setup_.watches.back().first;
    for (size_t kind = 0; kind < setup_.kinds.size(); ++kind) {
      const std::string prefix =
          fmt::format("{}, {}: kill -9 -> ", setup_.name, setup_.kinds[kind]);
      const Latencies& first = series_[{kind, names[0]}];
      const std::string samples = fmt::format(
          "{} kills in {} rounds, observed at once; load average {:.1f} before, {:.1f} after",
          first.all.size(), first.round_p50.size(), load_before_, load_after_);
      for (const std::string& name : names) {
        const Latencies& series = series_[{kind, name}];
        const bool notice = name == kCallback || name == kMessage;
        Figure& p50 = report.Add(prefix + name, "p50, median of rounds",
                                 Median(series.round_p50) / 1000, "ms");
        const Summary all = Summarize(series.all);
        if (notice) {
          const Latencies& base = series_[{kind, watcher_daemon}];
          std::vector<double> ratios;
          for (size_t r = 0; r < series.round_p50.size(); ++r) {
            ratios.push_back(base.round_p50[r] > 0 ? series.round_p50[r] / base.round_p50[r] : 0);
          }
          p50.WithBaseline(Median(base.round_p50) / 1000)
              .WithRatio(Median(ratios))
              .WithNote(fmt::format("baseline: {}; ratio min of rounds {:.2f}, max {:.2f}",
                                    watcher_daemon, Min(ratios), Max(ratios)));
        } else {
          p50.WithNote(samples);
        }
        Figure& p99 = report.Add(prefix + name, "p99, all kills", all.p99 / 1000, "ms");
        p99.WithNote(fmt::format("min {:.2f} ms, max {:.2f} ms", all.min / 1000, all.max / 1000));
        if (notice && setup_.local) {
          p99.WithTarget({Target::Bound::kAtMost, 10, Target::Applies::kValue});
        }
      }
      for (const char* form : {kCallback, kMessage}) {
        const Summary beyond = Summarize(series_[{kind, Beyond(form)}].all);
        Figure& figure = report.Add(fmt::format("{}, {}: {}, after {}", setup_.name,
                                                setup_.kinds[kind], form, watcher_daemon),
                                    "p99, all kills", beyond.p99 / 1000, "ms");
        figure.WithNote(
            fmt::format("what the watcher's runtime adds; p50 {:.2f} ms", beyond.p50 / 1000));
        if (!setup_.local) figure.WithTarget({Target::Bound::kAtMost, 5, Target::Applies::kValue});
      }
    }
  }

  const NotifyBenchOptions& options_;
  Setup setup_;
  std::map<std::pair<size_t, std::string>, Latencies> series_;  // by kind and observer
  double load_before_ = 0, load_after_ = 0;
  std::mt19937 random_{16};
  std::uniform_int_distribution<int> jitter_{0, kMaxJitterMs};
};

Status RunOneHost(const NotifyBenchOptions& options, Report& report) {
  TOCL_ASSIGN_OR_RETURN(auto daemon, DaemonProcess::Start(options.toclsd_path, seconds(15),
                                                          {"--spawn-allow", kWorker}));
  TOCL_ASSIGN_OR_RETURN(auto watch, DirectoryWatch::Start(daemon->address()));
  TOCL_ASSIGN_OR_RETURN(auto watcher, NoticeWatcher::Start(daemon->address(), "shm"));
  Setup setup;
  setup.name = "one host";
  setup.kinds = {"enrolled process", "spawned process"};
  setup.watches = {{"daemon Watch shows the exit", watch.get()}};
  setup.recorded_name = "daemon marks it exited (its exited_at)";
  setup.watcher = watcher.get();
  const std::string address = daemon->address();
  setup.start = [&, address](size_t kind) -> Result<TargetProcess> {
    return kind == 0 ? StartEnrolled(address) : StartSpawned(*watcher);
  };
  NotifyRun run(options, std::move(setup));
  return run.Run(report);
}

Status RunCluster(const NotifyBenchOptions& options, Report& report) {
  TOCL_ASSIGN_OR_RETURN(auto cluster,
                        StartBenchCluster("notify --cluster", 2, options.toclsd_path));
  if (cluster == nullptr) return Status::Ok();
  // Every observer runs here, in the root namespace, and reaches the
  // daemons through their unix sockets; the watcher needs no network to
  // the target (notices come from its daemon, and the message is local).
  TOCL_ASSIGN_OR_RETURN(auto target_watch,
                        DirectoryWatch::Start(cluster->DaemonSocket(kTargetHost)));
  TOCL_ASSIGN_OR_RETURN(auto replica_watch,
                        DirectoryWatch::Start(cluster->DaemonSocket(kWatcherHost)));
  TOCL_ASSIGN_OR_RETURN(auto watcher,
                        NoticeWatcher::Start(cluster->DaemonSocket(kWatcherHost), "shm"));
  Setup setup;
  setup.name = "h2 -> h1";
  setup.kinds = {"enrolled process"};
  setup.watches = {{"h2 Watch shows the exit (the target's daemon)", target_watch.get()},
                   {"h1 Watch shows the exit (replicated)", replica_watch.get()}};
  setup.recorded_name = "h2 marks it exited (its exited_at)";
  setup.watcher = watcher.get();
  setup.local = false;
  TOCL_ASSIGN_OR_RETURN(auto replica,
                        DirectoryClient::Connect(cluster->DaemonSocket(kWatcherHost)));
  setup.start = [&](size_t) -> Result<TargetProcess> {
    TOCL_ASSIGN_OR_RETURN(TargetProcess target, StartInHost(*cluster, kTargetHost));
    // Notify looks the target up on h1: wait until it is replicated there.
    if (!testing::WaitUntil([&] { return replica->Lookup(target.gid).ok(); }, seconds(30),
                            milliseconds(1))) {
      return DeadlineExceeded(
          fmt::format("{} did not reach h1's directory", target.gid.ToString()));
    }
    return target;
  };
  NotifyRun run(options, std::move(setup));
  return run.Run(report);
}

}  // namespace

Status RunNotifyBench(const NotifyBenchOptions& options, Report& report) {
  return options.cluster ? RunCluster(options, report) : RunOneHost(options, report);
}

}  // namespace tocl::bench
