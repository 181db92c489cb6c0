// The fault-injection soak (issue #7 §4, issue #18): three hosts in network
// namespaces (netns_cluster.h), two networks, a tocl-soak-worker on each
// host streaming checksummed, sequence-numbered messages to the next host,
// while the test kills and restarts workers and daemons, destroys the
// workers' tcp connections, sets links down and slows or drops their
// traffic. At the end, message by message: every one the library said was
// sent came exactly once, in order, intact, and every one that did not come
// was said failed (soak_ledger.h); memory and descriptors of daemons and
// workers stayed within bounds; every daemon's directory says the same.
// README.md has the figures' meaning.
//
// Environment: TOCL_SOAK_SECONDS (fault phase, default 60), TOCL_SOAK_SEED
// (default: drawn and printed), TOCL_SOAK_THREADS (per worker, default 2),
// TOCL_SOAK_RATE (messages a second per sending thread, default 50; 0: as
// fast as they go), TOCL_SOAK_FAULTS (the fault kinds to draw from, a comma
// list; default all), TOCL_SOAK_LOG_DIR (where to save every worker's
// output and records and every daemon's log at the end; a failed run saves
// them in /tmp/tocl-soak-* without it).
// tests/soak/run.sh runs the long version.
//
// Every wait is a poll with a deadline; sleeps only let a fault last or
// space the samples.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "catch_failure_listener.h"
#include "failure_check.h"
#include "netns_cluster.h"
#include "netns_skip.h"
#include "soak_faults.h"
#include "soak_ledger.h"
#include "soak_resources.h"
#include "soak_say.h"
#include "soak_workers.h"
#include "temp_dir.h"
#include "tocl/directory_client.h"

namespace tocl::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int kHosts = 3;
constexpr int kNetworks = 2;
// Every stream has had this many messages said sent before the faults
// start, and again this many more after they ended.
constexpr uint64_t kFlowing = 20;
constexpr milliseconds kWarmup = seconds(10);
constexpr milliseconds kSampleEvery = seconds(5);
constexpr milliseconds kRecoveryTimeout = seconds(120);
constexpr milliseconds kAgreementTimeout = seconds(30);

// Growth allowed from a process's baseline (its first sample after the
// warm-up) to the end (README.md says why these). Under a sanitizer its
// shadow memory and allocator caches grow with what a process touches
// (a daemon grew ~44 MiB in 67 s under TSan): there the RSS bounds only
// catch growth far past that; the fd bound stays.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int64_t kSanitizerRssFactor = 4;
#else
constexpr int64_t kSanitizerRssFactor = 1;
#endif
constexpr ResourceBounds kBounds = {.worker_rss_growth_kib = 64 * 1024 * kSanitizerRssFactor,
                                    .daemon_rss_growth_kib = 32 * 1024 * kSanitizerRssFactor,
                                    .fd_growth = 16,
                                    .min_observed = seconds(30)};

struct SoakConfig {
  milliseconds duration = seconds(60);
  uint64_t seed = 0;
  int threads = 2;
  uint32_t rate = 50;
  std::set<FaultKind> faults{std::begin(kAllFaultKinds), std::end(kAllFaultKinds)};
};

uint64_t EnvNumber(const char* name, uint64_t fallback, uint64_t low, uint64_t high) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const uint64_t value = std::strtoull(text, &end, 10);
  if (*end != '\0' || value < low || value > high) {
    FAIL(name << "='" << text << "' is not a number from " << low << " to " << high);
  }
  return value;
}

SoakConfig ConfigFromEnvironment() {
  SoakConfig config;
  config.duration = seconds(EnvNumber("TOCL_SOAK_SECONDS", 60, 1, 7 * 24 * 3600));
  config.seed = EnvNumber("TOCL_SOAK_SEED", std::random_device{}() % 1'000'000'000, 0, UINT64_MAX);
  config.threads = static_cast<int>(EnvNumber("TOCL_SOAK_THREADS", 2, 1, 16));
  config.rate = static_cast<uint32_t>(EnvNumber("TOCL_SOAK_RATE", 50, 0, 100'000));
  if (const char* kinds = std::getenv("TOCL_SOAK_FAULTS"); kinds != nullptr && *kinds != '\0') {
    auto parsed = ParseFaultKinds(kinds);
    if (!parsed.ok()) FAIL("TOCL_SOAK_FAULTS='" << kinds << "': " << parsed.status().message());
    config.faults = *parsed;
  }
  return config;
}

std::string FaultKindsText(const std::set<FaultKind>& kinds) {
  std::string text;
  for (FaultKind kind : kinds) text += (text.empty() ? "" : ",") + FaultKindName(kind);
  return text;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Messages the library said were sent, of each (host, thread) of the
// current workers, as their last stat lines say.
std::map<std::pair<int, int>, uint64_t> SaidSentNow(const SoakWorkers& workers) {
  std::map<std::pair<int, int>, uint64_t> said;
  for (int h = 1; h <= kHosts; ++h) {
    for (const auto& [thread, stat] : workers.LatestStats(h)) {
      said[{h, thread}] = stat.Number("ok");
    }
  }
  return said;
}

// Whether every thread of every current worker had `more` said sent beyond `since`.
bool AllFlowing(const SoakWorkers& workers, int threads,
                const std::map<std::pair<int, int>, uint64_t>& since, uint64_t more) {
  const auto now = SaidSentNow(workers);
  for (int h = 1; h <= kHosts; ++h) {
    for (int t = 0; t < threads; ++t) {
      auto it = now.find({h, t});
      auto before = since.find({h, t});
      const uint64_t base = before == since.end() ? 0 : before->second;
      if (it == now.end() || it->second < base + more) return false;
    }
  }
  return true;
}

// How many "stat" lines each thread of every current worker has printed.
std::map<std::pair<int, int>, size_t> StatLines(SoakWorkers& workers) {
  std::map<std::pair<int, int>, size_t> lines;
  for (int h = 1; h <= kHosts; ++h) {
    if (!workers.Running(h)) continue;
    for (const WorkerEvent& event : workers.Current(h).worker->Events("stat")) {
      ++lines[{h, static_cast<int>(event.Number("thread"))}];
    }
  }
  return lines;
}

// Whether every thread of every current worker printed at least `more`
// "stat" lines after `since`.
bool StatsSince(SoakWorkers& workers, int threads,
                const std::map<std::pair<int, int>, size_t>& since, size_t more) {
  const auto now = StatLines(workers);
  for (int h = 1; h <= kHosts; ++h) {
    for (int t = 0; t < threads; ++t) {
      auto it = now.find({h, t});
      auto before = since.find({h, t});
      const size_t base = before == since.end() ? 0 : before->second;
      if (it == now.end() || it->second < base + more) return false;
    }
  }
  return true;
}

std::string Progress(const SoakWorkers& workers) {
  std::string text;
  for (const auto& [key, said] : SaidSentNow(workers)) {
    text += fmt::format(" h{}/t{} {}", key.first, key.second, said);
  }
  return text;
}

// "gid state,..." of what a query shows on one daemon.
std::string QueryText(NetnsCluster& cluster, int host, const std::string& expression) {
  auto client = DirectoryClient::Connect(cluster.DaemonSocket(host));
  if (!client.ok()) return "error: " + client.status().ToString();
  auto all = (*client)->QueryAll(expression);
  if (!all.ok()) return "error: " + all.status().ToString();
  std::string text;
  for (const Entity& entity : *all) {
    text += fmt::format("{} {},", entity.gid.ToString(), EntityStateName(entity.state));
  }
  return text;
}

// Writes every worker's output and every daemon's log into `dir`: what
// happened, for the record of a long run or a failure.
std::string SaveLogs(const std::string& dir, NetnsCluster& cluster, const SoakWorkers& workers) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return fmt::format("cannot make {}: {}", dir, error.message());
  for (const auto& incarnation : workers.All()) {
    std::ofstream(fmt::format("{}/worker-{}.log", dir, incarnation->Label()))
        << incarnation->worker->Output();
    for (const char* records : {".send", ".recv"}) {
      std::filesystem::copy_file(incarnation->records + records,
                                 fmt::format("{}/records-{}{}", dir, incarnation->Label(), records),
                                 std::filesystem::copy_options::overwrite_existing, error);
    }
  }
  if (!workers.stacks().empty()) std::ofstream(dir + "/worker-stacks.txt") << workers.stacks();
  for (int h = 1; h <= kHosts; ++h) {
    std::filesystem::copy_file(cluster.HostDaemon(h).log_path(),
                               fmt::format("{}/toclsd-h{}.log", dir, h),
                               std::filesystem::copy_options::overwrite_existing, error);
  }
  return fmt::format("worker outputs and daemon logs are in {}", dir);
}

// Every thread's stack in each current worker (gdb), for a run that stopped
// moving: where a sending thread waits shows what never came. Best effort:
// without gdb it says so.
std::string WorkerStacks(SoakWorkers& workers) {
  auto gdb = FindProgram("gdb");
  if (!gdb.ok()) return "gdb is not installed: no stacks\n";
  std::string text;
  for (int h = 1; h <= kHosts; ++h) {
    SoakIncarnation& current = workers.Current(h);
    const pid_t pid = current.worker->pid();
    auto run = RunProgram({*gdb, "-batch", "-p", std::to_string(pid), "-ex", "thread apply all bt"},
                          seconds(60));
    text += fmt::format("==== worker {} (pid {}) ====\n{}\n", current.Label(), pid,
                        run.ok() ? run->output : run.status().ToString());
  }
  return text;
}

// Saves the logs (SaveLogs) when it goes away: into $TOCL_SOAK_LOG_DIR when
// set, else into a new /tmp/tocl-soak-* directory when the test failed
// (also when a REQUIRE ended it early).
class LogKeeper {
 public:
  LogKeeper(NetnsCluster& cluster, const SoakWorkers& workers)
      : cluster_(cluster), workers_(workers) {}
  ~LogKeeper() {
    const char* dir = std::getenv("TOCL_SOAK_LOG_DIR");
    if (dir != nullptr && *dir != '\0') {
      SoakSay(SaveLogs(dir, cluster_, workers_));
    } else if (CurrentTestFailed()) {
      char pattern[] = "/tmp/tocl-soak-XXXXXX";
      if (::mkdtemp(pattern) != nullptr) SoakSay(SaveLogs(pattern, cluster_, workers_));
    }
  }
  LogKeeper(const LogKeeper&) = delete;
  LogKeeper& operator=(const LogKeeper&) = delete;

 private:
  NetnsCluster& cluster_;
  const SoakWorkers& workers_;
};

TEST_CASE(
    "soak: through killed workers, daemons and connections, links down, delay and loss, every "
    "message the library said was sent arrives once, in order, intact, and every other was "
    "said failed",
    "[netns][soak]") {
  TOCL_SKIP_WITHOUT_NETNS();
  const SoakConfig config = ConfigFromEnvironment();
  const auto test_start = Clock::now();
  SoakSay(fmt::format(
      "seed {} (TOCL_SOAK_SEED={} replays the fault schedule), {} s of faults ({}), {} threads "
      "per worker, {} messages a second per thread",
      config.seed, config.seed, config.duration.count() / 1000, FaultKindsText(config.faults),
      config.threads, config.rate == 0 ? std::string("unlimited") : std::to_string(config.rate)));

  NetnsClusterOptions options;
  options.hosts = kHosts;
  options.networks = std::vector<NetnsLinkSpec>(kNetworks);
  auto created = NetnsCluster::Create(std::move(options));
  INFO("NetnsCluster::Create -> " << created.status().ToString());
  REQUIRE(created.ok());
  NetnsCluster& cluster = **created;

  // Every message's record (soak_worker.cc), read at the end.
  const TempDir records("tocl-soak-records-");
  SoakWorkerSettings settings;
  settings.threads = config.threads;
  settings.seed = config.seed;
  settings.rate = config.rate;
  settings.stall_timeout = seconds(10);
  // Past the runtimes' unreachable_timeout (30 s): a buffer for a peer no
  // network reaches ends kFailed by then.
  settings.drain_timeout = seconds(45);
  settings.records_dir = records.path();
  SoakWorkers workers(cluster, settings);
  const LogKeeper logs(cluster, workers);
  {
    Status started = workers.StartAll();
    INFO(started.ToString());
    REQUIRE(started.ok());
  }

  ResourceTracker resources(kWarmup);
  auto sample_all = [&] {
    for (int h = 1; h <= kHosts; ++h) {
      Daemon& daemon = cluster.HostDaemon(h);
      if (daemon.running()) resources.Sample(fmt::format("toclsd h{}", h), daemon.pid());
      if (workers.Running(h)) {
        SoakIncarnation& worker = workers.Current(h);
        resources.Sample("worker " + worker.Label(), worker.worker->pid());
      }
    }
  };

  sample_all();  // a process's warm-up counts from its first sample
  const auto first_sample = Clock::now();

  // Warm-up: every stream carries messages, and the processes have run long
  // enough for their baselines.
  {
    INFO("acknowledged so far:" << Progress(workers));
    REQUIRE(WaitUntil([&] { return AllFlowing(workers, config.threads, {}, kFlowing); },
                      seconds(60), milliseconds(200)));
  }
  std::this_thread::sleep_until(first_sample + kWarmup + milliseconds(100));
  sample_all();
  SoakSay(fmt::format("warm-up done after {:.1f} s; said sent:{}", SecondsSince(test_start),
                      Progress(workers)));

  // Faults.
  FaultPolicy policy;
  policy.kinds = config.faults;
  const std::vector<PlannedFault> plan =
      PlanFaults(config.seed, config.duration, kHosts, kNetworks, policy);
  SoakSay(fmt::format("{} faults planned", plan.size()));
  std::map<FaultKind, int> counts;
  std::vector<BegunFault> begun;
  {
    FaultInjector faults(cluster, workers);
    const auto phase_start = Clock::now();
    auto next_sample = Clock::now() + kSampleEvery;
    // Runs the due fault ends and samples until `until` (or, with `fault`,
    // until its host is free and there is room for it).
    auto run_until = [&](Clock::time_point until, const PlannedFault* fault) {
      for (;;) {
        const auto now = Clock::now();
        Status ended = faults.EndDue(now);
        INFO(ended.ToString());
        REQUIRE(ended.ok());
        if (now >= next_sample) {
          sample_all();
          next_sample = now + kSampleEvery;
        }
        if (now >= until) {
          if (fault == nullptr) return;
          if (faults.HostFree(fault->host) &&
              faults.active() < static_cast<size_t>(policy.max_concurrent)) {
            return;
          }
        }
        const auto wake = std::min({until > now ? until : faults.NextEnd(), faults.NextEnd(),
                                    next_sample, now + milliseconds(200)});
        std::this_thread::sleep_until(wake);
      }
    };
    for (const PlannedFault& fault : plan) {
      run_until(phase_start + fault.start, &fault);
      Status applied = faults.Begin(fault);
      INFO(applied.ToString());
      REQUIRE(applied.ok());
    }
    run_until(std::max(phase_start + config.duration, faults.NextEnd()), nullptr);
    Status ended = faults.EndAll();
    INFO(ended.ToString());
    REQUIRE(ended.ok());
    counts = faults.counts();
    begun = faults.begun();
  }
  SoakSay(fmt::format("faults over after {:.1f} s; said sent:{}", SecondsSince(test_start),
                      Progress(workers)));

  // Recovery: every stream of the workers now running moves again. The
  // counts it starts from are the first ones wholly made after the faults
  // ended: the workers print them every stats_interval, so the line printed
  // second after the end is one (an older count would let messages said
  // sent before the end count as recovery).
  {
    const auto lines_at_end = StatLines(workers);
    INFO("waiting for two rounds of stat lines after the faults ended");
    const bool printed =
        WaitUntil([&] { return StatsSince(workers, config.threads, lines_at_end, 2); },
                  kRecoveryTimeout, milliseconds(100));
    if (!printed) workers.set_stacks(WorkerStacks(workers));
    REQUIRE(printed);
  }
  const auto at_end_of_faults = SaidSentNow(workers);
  {
    auto next_sample = Clock::now();
    const bool flowing = WaitUntil(
        [&] {
          if (Clock::now() >= next_sample) {
            sample_all();
            next_sample = Clock::now() + kSampleEvery;
          }
          return AllFlowing(workers, config.threads, at_end_of_faults, kFlowing);
        },
        kRecoveryTimeout, milliseconds(200));
    if (!flowing) {
      workers.set_stacks(WorkerStacks(workers));
      SoakSay("streams did not recover: the workers' stacks go to worker-stacks.txt with the logs");
    }
    INFO("said sent at the end of the faults:" << [&] {
      std::string text;
      for (const auto& [key, said] : at_end_of_faults) {
        text += fmt::format(" h{}/t{} {}", key.first, key.second, said);
      }
      return text;
    }() << "\nnow:" << Progress(workers));
    REQUIRE(flowing);
  }
  sample_all();
  SoakSay(fmt::format("recovered after {:.1f} s; said sent:{}", SecondsSince(test_start),
                      Progress(workers)));

  // The directory of every daemon says the same, and it is the truth: the
  // workers now running are the only processes running.
  std::set<std::string> expected_running;
  for (int h = 1; h <= kHosts; ++h) {
    expected_running.insert(workers.Current(h).worker->gids().at(0).process().ToString());
  }
  std::string running_text;
  for (const std::string& gid : expected_running) running_text += gid + " running,";
  for (const std::string expression : {"kind=host", "kind=process", "kind=thread"}) {
    std::vector<std::string> seen(kHosts + 1);
    const bool agree = WaitUntil(
        [&] {
          for (int h = 1; h <= kHosts; ++h) seen[h] = QueryText(cluster, h, expression);
          return seen[1].rfind("error", 0) != 0 && seen[1] == seen[2] && seen[1] == seen[3];
        },
        kAgreementTimeout, milliseconds(500));
    INFO(expression << "\nh1: " << seen[1] << "\nh2: " << seen[2] << "\nh3: " << seen[3]);
    CHECK(agree);
  }
  // Threads too: the running receivers are those of the current workers,
  // and each current sending thread has one running stream thread (a lost
  // registration or unregistration would replicate to every host alike).
  std::vector<Gid> receivers;
  for (int h = 1; h <= kHosts; ++h) {
    for (const Gid& gid : workers.Current(h).worker->gids()) receivers.push_back(gid);
  }
  std::sort(receivers.begin(), receivers.end());
  std::string receivers_text;
  for (const Gid& gid : receivers) receivers_text += gid.ToString() + " running,";
  const size_t senders_expected = static_cast<size_t>(kHosts * config.threads);
  for (int h = 1; h <= kHosts; ++h) {
    std::string receivers_seen, senders_seen;
    const bool truthful = WaitUntil(
        [&] {
          receivers_seen =
              QueryText(cluster, h, "kind=thread and name~soak-recv-* and state=running");
          senders_seen =
              QueryText(cluster, h, "kind=thread and name~soak-send-* and state=running");
          return receivers_seen == receivers_text &&
                 std::count(senders_seen.begin(), senders_seen.end(), ',') ==
                     static_cast<std::ptrdiff_t>(senders_expected);
        },
        kAgreementTimeout, milliseconds(500));
    INFO("h" << h << " receivers: " << receivers_seen << "\nexpected: " << receivers_text
             << "\nsenders: " << senders_seen << "\nexpected " << senders_expected);
    CHECK(truthful);
  }
  for (int h = 1; h <= kHosts; ++h) {
    CHECK(QueryText(cluster, h, "kind=process and state=running") == running_text);
    CHECK(QueryText(cluster, h, "kind=host and state=running") ==
          "h1 running,h2 running,h3 running,");
  }

  // Stop: every stream drains and ends; then the books.
  {
    Status stopped = workers.StopAll(2 * settings.drain_timeout + seconds(30));
    INFO(stopped.ToString());
    CHECK(stopped.ok());
  }
  const SoakLedger ledger = ReadSoakLedger(workers.All(), config.threads, begun, kHosts);
  const SoakFigures& figures = ledger.figures;
  std::string fault_text;
  std::string fault_json;
  int fault_total = 0;
  int sockets = 0;
  for (const BegunFault& fault : begun) sockets += fault.sockets;
  for (FaultKind kind : kAllFaultKinds) {
    fault_total += counts[kind];
    fault_text +=
        fmt::format("{}{} {}", fault_text.empty() ? "" : ", ", FaultKindName(kind), counts[kind]);
    fault_json += fmt::format("{}\"{}\":{}", fault_json.empty() ? "" : ",", FaultKindName(kind),
                              counts[kind]);
  }
  SoakSay(fmt::format(
      "figures (seed {}, {} s of faults, {:.0f} s in all):\n  faults injected: {} ({}; conn-kill "
      "destroyed {} sockets)\n{}"
      "  resources (baseline after {} s of warm-up; bounds: worker RSS +{} MiB, toclsd RSS +{} "
      "MiB, fds +{}):\n{}",
      config.seed, config.duration.count() / 1000, SecondsSince(test_start), fault_total,
      fault_text, sockets, FormatFigures(figures), kWarmup.count() / 1000,
      kBounds.worker_rss_growth_kib / 1024, kBounds.daemon_rss_growth_kib / 1024, kBounds.fd_growth,
      resources.Report()));
  // The same, one line for a machine.
  std::fputs(fmt::format("soak-figures {{\"seed\":{},\"fault_seconds\":{},\"faults\":{{{}}},"
                         "\"conn_kill_sockets\":{},\"messages\":{}}}\n",
                         config.seed, config.duration.count() / 1000, fault_json, sockets,
                         FiguresJson(figures))
                 .c_str(),
             stdout);
  std::fflush(stdout);

  std::string problems;
  for (const std::string& problem : ledger.problems) problems += "\n  " + problem;
  for (const std::string& problem : resources.Check(kBounds)) problems += "\n  " + problem;
  INFO("seed " << config.seed << "; problems:" << problems);
  CHECK(problems.empty());
  CHECK(figures.lost == 0);
  CHECK(figures.dups == 0);
  CHECK(figures.unresolved == 0);
  CHECK(figures.phantom == 0);
  CHECK(figures.bad == 0);
  CHECK(figures.said_sent > 0);
  CHECK(fault_total > 0);
  // ss -K must find the connections it is meant to destroy.
  if (counts[FaultKind::kConnKill] >= 3) CHECK(sockets > 0);
}

}  // namespace
}  // namespace tocl::testing
