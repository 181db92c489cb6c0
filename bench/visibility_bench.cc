#include "visibility_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cluster/bench_cluster.h"
#include "daemon_process.h"
#include "stats.h"
#include "tocl/directory_client.h"
#include "tocl/runtime.h"

namespace tocl::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kSampleDeadline = std::chrono::seconds(10);

double MicrosBetween(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::micro>(to - from).count();
}

// Waits, on a thread of its own, for `observer`'s WaitForQuery of
// `query` (one match) to return, from before the thread is registered: the
// moment it did. Start() returns once that thread runs.
class Observation {
 public:
  Observation(Runtime& observer, std::string query)
      : observer_(observer), query_(std::move(query)) {}

  void Start() {
    std::promise<void> running;
    std::future<void> started = running.get_future();
    seen_ = std::async(std::launch::async, [this, &running]() -> Result<Clock::time_point> {
      running.set_value();
      TOCL_RETURN_IF_ERROR(observer_.WaitForQuery(query_, 1, kSampleDeadline).status());
      return Clock::now();
    });
    started.wait();
  }
  Result<Clock::time_point> Seen() { return seen_.get(); }

 private:
  Runtime& observer_;
  const std::string query_;
  std::future<Result<Clock::time_point>> seen_;
};

// Where the threads come from and who looks for them.
struct Setup {
  std::unique_ptr<Runtime> enroller;                // EnrollThread (measured)
  std::unique_ptr<DirectoryClient> session_client;  // the baseline's enrollment
  std::unique_ptr<ProcessSession> session;          // RegisterThreads (baseline)
  std::vector<std::unique_ptr<Runtime>> observers;  // one per host looked at
  std::vector<std::string> observer_names;          // "same host", "another host"
  uint32_t next_baseline_thread = 1;
  uint64_t next_probe = 1;  // the attribute probe=N each thread has
};

Result<std::unique_ptr<Runtime>> StartRuntime(const std::string& address, std::string name) {
  RuntimeOptions options;
  options.daemon_address = address;
  options.name = std::move(name);
  options.networks = "shm";
  options.stats_interval = std::chrono::milliseconds(0);
  return Runtime::Start(options);
}

// One case and round: `samples` threads, each until a WaitForQuery on
// `observer`, waiting already, returns it. Returns the samples from
// EnrollThread's return (measured) or from the RegisterThreads call
// (baseline).
Result<std::vector<double>> MeasureOnce(Setup& setup, Runtime& observer, bool baseline,
                                        int samples) {
  std::vector<double> micros;
  micros.reserve(static_cast<size_t>(samples));
  for (int i = 0; i < samples; ++i) {
    const std::string probe = std::to_string(setup.next_probe++);
    Observation observation(observer, "probe=" + probe);
    observation.Start();
    Clock::time_point from;
    if (baseline) {
      const ThreadInfo thread{Gid::Thread(setup.session->gid(), setup.next_baseline_thread++),
                              "probe",
                              {{"probe", probe}}};
      from = Clock::now();
      TOCL_RETURN_IF_ERROR(setup.session->RegisterThreads(std::span(&thread, 1)));
    } else {
      TOCL_RETURN_IF_ERROR(setup.enroller->EnrollThread("probe", {{"probe", probe}}).status());
      from = Clock::now();
    }
    TOCL_ASSIGN_OR_RETURN(Clock::time_point seen, observation.Seen());
    micros.push_back(MicrosBetween(from, seen));
  }
  return micros;
}

Status Measure(Setup& setup, const VisibilityBenchOptions& options, Report& report) {
  const int rounds = std::max(5, options.repeats);
  // A plain round trip on the same channel as the polls, for scale.
  std::vector<double> lookups;
  const Gid host = setup.enroller->gid().host();
  for (size_t o = 0; o < setup.observers.size(); ++o) {
    Runtime& observer = *setup.observers[o];
    std::vector<double> measured, baseline, ratios, round_p99;
    for (int round = 0; round < rounds; ++round) {
      std::vector<double> runtime_samples, session_samples;
      const bool baseline_first = round % 2 == 1;
      for (int turn = 0; turn < 2; ++turn) {
        const bool is_baseline = (turn == 0) == baseline_first;
        TOCL_ASSIGN_OR_RETURN(std::vector<double> samples,
                              MeasureOnce(setup, observer, is_baseline, options.samples));
        (is_baseline ? session_samples : runtime_samples) = std::move(samples);
      }
      for (int i = 0; i < 50 && o == 0; ++i) {
        const auto start = Clock::now();
        TOCL_RETURN_IF_ERROR(observer.Lookup(host).status());
        lookups.push_back(MicrosBetween(start, Clock::now()));
      }
      ratios.push_back(Median(runtime_samples) / Median(session_samples));
      round_p99.push_back(Percentile(runtime_samples, 99));
      measured.insert(measured.end(), runtime_samples.begin(), runtime_samples.end());
      baseline.insert(baseline.end(), session_samples.begin(), session_samples.end());
      fmt::print(stderr, "visibility: {} round {}: p50 {:.0f} us (baseline {:.0f} us)\n",
                 setup.observer_names[o], round + 1, Median(runtime_samples),
                 Median(session_samples));
    }
    const Summary runtime_summary = Summarize(measured);
    const Summary session_summary = Summarize(baseline);
    const std::string name = fmt::format("thread visible to a query on {} (after EnrollThread)",
                                         setup.observer_names[o]);
    report.Add(name, "p50", runtime_summary.p50, "us")
        .WithBaseline(session_summary.p50)
        .WithRatio(Median(ratios))
        .WithNote(fmt::format(
            "{} threads; seen by a WaitForQuery waiting since before; baseline: a synchronous "
            "RegisterThreads of one thread, from the call; ratio = median over rounds (min {:.2f})",
            measured.size(), Min(ratios)));
    report.Add(name, "p99", runtime_summary.p99, "us")
        .WithBaseline(session_summary.p99)
        .WithRatio(session_summary.p99 > 0 ? runtime_summary.p99 / session_summary.p99 : 0)
        .WithNote(fmt::format("worst round p99 {:.0f} us, max {:.0f} us", Max(round_p99),
                              runtime_summary.max));
  }
  report.Add("lookup round trip (same host, for scale)", "p50", Median(lookups), "us")
      .WithNote(fmt::format("{} Lookup calls of the host entity", lookups.size()));
  return Status::Ok();
}

Status Prepare(Setup& setup, const std::string& enroll_address,
               const std::vector<std::string>& observer_addresses) {
  TOCL_ASSIGN_OR_RETURN(setup.enroller, StartRuntime(enroll_address, "visibility-enroller"));
  TOCL_ASSIGN_OR_RETURN(setup.session_client, DirectoryClient::Connect(enroll_address));
  EnrollOptions session;
  session.name = "visibility-baseline";
  TOCL_ASSIGN_OR_RETURN(setup.session, setup.session_client->Enroll(session));
  for (size_t i = 0; i < observer_addresses.size(); ++i) {
    TOCL_ASSIGN_OR_RETURN(auto observer, StartRuntime(observer_addresses[i],
                                                      fmt::format("visibility-observer-{}", i)));
    setup.observers.push_back(std::move(observer));
  }
  return Status::Ok();
}

}  // namespace

Status RunVisibilityBench(const VisibilityBenchOptions& options, Report& report) {
  Setup setup;
  if (!options.cluster) {
    std::unique_ptr<DaemonProcess> daemon;
    std::string address = options.daemon_address;
    if (address.empty()) {
      TOCL_ASSIGN_OR_RETURN(daemon, DaemonProcess::Start(options.toclsd_path));
      address = daemon->address();
    }
    setup.observer_names = {"the same host"};
    TOCL_RETURN_IF_ERROR(Prepare(setup, address, {address}));
    Status status = Measure(setup, options, report);
    setup = Setup();  // everything enrolled goes before its daemon
    return status;
  }
  TOCL_ASSIGN_OR_RETURN(auto cluster,
                        StartBenchCluster("visibility --cluster", 2, options.toclsd_path));
  if (cluster == nullptr) return Status::Ok();
  setup.observer_names = {"the same host", "another host"};
  TOCL_RETURN_IF_ERROR(Prepare(setup, cluster->DaemonSocket(1),
                               {cluster->DaemonSocket(1), cluster->DaemonSocket(2)}));
  Status status = Measure(setup, options, report);
  setup = Setup();
  return status;
}

}  // namespace tocl::bench
