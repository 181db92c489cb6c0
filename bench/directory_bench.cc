#include "directory_bench.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <latch>
#include <memory>
#include <thread>
#include <vector>

#include "daemon_process.h"
#include "sqlite_baseline.h"
#include "stats.h"
#include "tocl/directory_client.h"

namespace tocl::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kMiB = 1024.0 * 1024.0;
constexpr uint32_t kQueryLimit = 100;
constexpr int kMinRounds = 5;
constexpr int kWarmupCalls = 200;
// A query case stops taking rounds once it has used this much time, so that
// a slow daemon still gives a report within minutes.
constexpr auto kQueryCaseBudget = std::chrono::seconds(30);
// One in this many registered threads is kept as a Lookup target.
constexpr uint64_t kLookupSampleEvery = 97;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double MicrosSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// Divides `total` into `parts` shares that differ by at most one.
uint64_t Share(uint64_t total, uint64_t parts, uint64_t index) {
  return total / parts + (index < total % parts ? 1 : 0);
}

// Every registered thread gets a number g (0, 1, 2, ... over the whole run),
// the name worker-g or merger-g and two attributes: role (merger for one
// thread in 1000, else worker) and shard (g mod 16). So after N threads there
// are N/1000 mergers, about half of them with shard=7.
class ThreadNumbering {
 public:
  ThreadInfo Next(Gid thread) {
    uint64_t g = next_++;
    bool merger = g % 1000 == 999;
    ThreadInfo info;
    info.gid = thread;
    info.name = fmt::format("{}-{}", merger ? "merger" : "worker", g);
    info.attributes.emplace("role", merger ? "merger" : "worker");
    info.attributes.emplace("shard", std::to_string(g % 16));
    return info;
  }
  uint64_t count() const { return next_; }
  uint64_t mergers() const { return next_ / 1000; }

 private:
  uint64_t next_ = 0;
};

// One enrolled "process", with its own client and channel as a separate
// process would have.
struct BenchProcess {
  std::unique_ptr<DirectoryClient> client;
  std::unique_ptr<ProcessSession> session;
  uint32_t next_thread = 1;
};

using Batches = std::vector<std::vector<ThreadInfo>>;

struct Run {
  explicit Run(const DirectoryBenchOptions& bench_options) : options(bench_options) {}
  const DirectoryBenchOptions& options;
  DaemonProcess* daemon = nullptr;  // null when measuring a running daemon
  std::string address;
  std::unique_ptr<DirectoryClient> client;
  std::unique_ptr<SqliteBaseline> baseline;
  ThreadNumbering numbering;
  std::vector<Gid> lookup_targets;
  int rounds = kMinRounds;
  // Enrolled for the whole run, so that their threads stay registered (and
  // running) while lookups, queries and memory are measured.
  std::unique_ptr<BenchProcess> single;
  std::vector<std::unique_ptr<BenchProcess>> writers;
};

void Progress(std::string_view text) {
  fmt::print(stderr, "[directory] {}\n", text);
}

Result<std::unique_ptr<BenchProcess>> EnrollProcess(const std::string& address,
                                                    const std::string& name) {
  auto process = std::make_unique<BenchProcess>();
  TOCL_ASSIGN_OR_RETURN(process->client, DirectoryClient::Connect(address));
  EnrollOptions enroll;
  enroll.name = name;
  enroll.attributes.emplace("role", "bench");
  TOCL_ASSIGN_OR_RETURN(process->session, process->client->Enroll(enroll));
  return process;
}

std::vector<ThreadInfo> MakeBatch(Run& run, BenchProcess& process, uint64_t size) {
  std::vector<ThreadInfo> batch;
  batch.reserve(size);
  Gid owner = process.session->gid();
  for (uint64_t i = 0; i < size; ++i) {
    Gid gid = Gid::FromRaw(owner.raw() | process.next_thread++);
    if (run.numbering.count() % kLookupSampleEvery == 0) run.lookup_targets.push_back(gid);
    batch.push_back(run.numbering.Next(gid));
  }
  return batch;
}

// `total` threads in batches of options.batch, dealt round-robin to
// `processes`: stream i holds the batches of processes[i].
std::vector<Batches> MakeStreams(Run& run, const std::vector<BenchProcess*>& processes,
                                 uint64_t total) {
  std::vector<Batches> streams(processes.size());
  uint64_t batch_count = (total + run.options.batch - 1) / run.options.batch;
  for (uint64_t b = 0; b < batch_count; ++b) {
    uint64_t size = std::min<uint64_t>(run.options.batch, total - b * run.options.batch);
    size_t stream = b % processes.size();
    streams[stream].push_back(MakeBatch(run, *processes[stream], size));
  }
  return streams;
}

Result<double> TimeBaseline(SqliteBaseline& baseline, const std::vector<Batches>& streams) {
  auto start = Clock::now();
  for (const Batches& batches : streams) {
    for (const auto& batch : batches) TOCL_RETURN_IF_ERROR(baseline.WriteBatch(batch));
  }
  return SecondsSince(start);
}

// Each process registers its batches on its own thread; the time is from
// the common start to the last acknowledgement.
Result<double> TimeRegistration(std::vector<BenchProcess*> processes,
                                const std::vector<Batches>& streams) {
  std::vector<Status> results(processes.size());
  std::latch ready(static_cast<std::ptrdiff_t>(processes.size() + 1));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < processes.size(); ++i) {
    threads.emplace_back([&, i] {
      ready.arrive_and_wait();
      for (const auto& batch : streams[i]) {
        results[i] = processes[i]->session->RegisterThreads(batch);
        if (!results[i].ok()) return;
      }
    });
  }
  ready.arrive_and_wait();
  auto start = Clock::now();
  for (std::thread& thread : threads) thread.join();
  double seconds = SecondsSince(start);
  for (const Status& result : results) TOCL_RETURN_IF_ERROR(result);
  return seconds;
}

struct RateCase {
  explicit RateCase(std::string case_name) : name(std::move(case_name)) {}
  std::string name;
  std::vector<double> measured;  // threads/s per round
  std::vector<double> baseline;
  std::vector<double> ratios;
  uint64_t batches_per_round = 0;
};

void AddRateFigures(Run& run, Report& report, const RateCase& rate) {
  report.Add(rate.name, "threads/s, median", Median(rate.measured), "threads/s")
      .WithBaseline(Median(rate.baseline))
      .WithRatio(Median(rate.ratios))
      .WithTarget({Target::Bound::kAtLeast, 200'000})
      .WithNote(fmt::format("{} rounds x {} batches of {}; baseline: raw SQLite",
                            rate.measured.size(), rate.batches_per_round, run.options.batch));
  report.Add(rate.name, "ratio to baseline, min", Min(rate.ratios), "x")
      .WithNote(fmt::format("slowest round {:.0f} threads/s", Min(rate.measured)));
}

Status RegisterPhase(Run& run, Report& report) {
  const DirectoryBenchOptions& options = run.options;
  TOCL_ASSIGN_OR_RETURN(run.single, EnrollProcess(run.address, "bench-single"));
  std::vector<BenchProcess*> writers;
  for (int i = 0; i < options.writers; ++i) {
    TOCL_ASSIGN_OR_RETURN(auto writer,
                          EnrollProcess(run.address, fmt::format("bench-writer-{}", i)));
    writers.push_back(writer.get());
    run.writers.push_back(std::move(writer));
  }

  RateCase one("register, 1 session");
  RateCase many(fmt::format("register, {} sessions", options.writers));
  // Each round registers one share of --threads through one session and one
  // through all writers, each next to the baseline writing the same batches.
  const auto shares = static_cast<uint64_t>(2 * run.rounds);
  for (int round = 0; round < run.rounds; ++round) {
    for (RateCase* rate : {&one, &many}) {
      std::vector<BenchProcess*> processes =
          rate == &one ? std::vector<BenchProcess*>{run.single.get()} : writers;
      uint64_t total = Share(options.threads, shares, 2 * round + (rate == &one ? 0 : 1));
      std::vector<Batches> streams = MakeStreams(run, processes, total);
      // Alternating which goes first cancels what one leaves the other
      // (dirty pages still being written back, a checkpoint, a warm cache).
      double baseline_s = 0;
      double daemon_s = 0;
      if (round % 2 == 0) {
        TOCL_ASSIGN_OR_RETURN(baseline_s, TimeBaseline(*run.baseline, streams));
        TOCL_ASSIGN_OR_RETURN(daemon_s, TimeRegistration(processes, streams));
      } else {
        TOCL_ASSIGN_OR_RETURN(daemon_s, TimeRegistration(processes, streams));
        TOCL_ASSIGN_OR_RETURN(baseline_s, TimeBaseline(*run.baseline, streams));
      }
      rate->baseline.push_back(static_cast<double>(total) / baseline_s);
      rate->measured.push_back(static_cast<double>(total) / daemon_s);
      rate->ratios.push_back(baseline_s / daemon_s);
      rate->batches_per_round = (total + options.batch - 1) / options.batch;
    }
    Progress(fmt::format(
        "register round {}/{}: 1 session {:.0f}/s (sqlite {:.0f}/s), {} sessions {:.0f}/s "
        "(sqlite {:.0f}/s)",
        round + 1, run.rounds, one.measured.back(), one.baseline.back(), options.writers,
        many.measured.back(), many.baseline.back()));
  }
  AddRateFigures(run, report, one);
  AddRateFigures(run, report, many);

  // Everything acknowledged must be there: the sparse role is countable.
  TOCL_ASSIGN_OR_RETURN(std::vector<Entity> mergers,
                        run.client->QueryAll("kind=thread and role=merger"));
  if (mergers.size() < run.numbering.mergers()) {
    return Internal(fmt::format("the daemon lists {} mergers after {} were registered",
                                mergers.size(), run.numbering.mergers()));
  }
  Progress(fmt::format("{} threads registered; the daemon lists all {} mergers",
                       run.numbering.count(), run.numbering.mergers()));
  return Status::Ok();
}

// Per round: the same number of Lookup and Ping calls back to back on one
// channel, the order alternating, so drifts of the machine hit both alike.
Status LookupPhase(Run& run, Report& report) {
  if (run.lookup_targets.empty()) return FailedPrecondition("no registered thread to look up");
  DirectoryClient& client = *run.client;
  const std::vector<Gid>& targets = run.lookup_targets;
  size_t next_target = 0;
  auto lookup = [&]() -> Status {
    Gid gid = targets[next_target++ % targets.size()];
    auto entity = client.Lookup(gid);
    if (!entity.ok()) return entity.status();
    if (entity->attributes.size() != 2) {
      return Internal(fmt::format("lookup {} returned {} attributes, expected 2", gid.ToString(),
                                  entity->attributes.size()));
    }
    return Status::Ok();
  };
  auto ping = [&]() -> Status { return client.Ping().status(); };
  auto measure = [](const auto& call, int calls, std::vector<double>& micros) -> Status {
    micros.clear();
    micros.reserve(calls);
    for (int i = 0; i < calls; ++i) {
      auto start = Clock::now();
      TOCL_RETURN_IF_ERROR(call());
      micros.push_back(MicrosSince(start));
    }
    return Status::Ok();
  };

  std::vector<double> samples;
  TOCL_RETURN_IF_ERROR(measure(lookup, kWarmupCalls, samples));
  TOCL_RETURN_IF_ERROR(measure(ping, kWarmupCalls, samples));

  const int calls = run.options.lookup_calls;
  std::vector<double> lookup_p50, lookup_p99, ping_p50, ping_p99, ratio_p50, ratio_p99;
  for (int round = 0; round < run.rounds; ++round) {
    Summary lookups, pings;
    for (int step = 0; step < 2; ++step) {
      bool lookup_now = (step + round) % 2 == 0;
      if (lookup_now) {
        TOCL_RETURN_IF_ERROR(measure(lookup, calls, samples));
        lookups = Summarize(samples);
      } else {
        TOCL_RETURN_IF_ERROR(measure(ping, calls, samples));
        pings = Summarize(samples);
      }
    }
    lookup_p50.push_back(lookups.p50);
    lookup_p99.push_back(lookups.p99);
    ping_p50.push_back(pings.p50);
    ping_p99.push_back(pings.p99);
    ratio_p50.push_back(lookups.p50 / pings.p50);
    ratio_p99.push_back(lookups.p99 / pings.p99);
    Progress(
        fmt::format("lookup round {}/{}: p50 {:.1f} us vs ping {:.1f} us, p99 {:.1f} vs {:.1f}",
                    round + 1, run.rounds, lookups.p50, pings.p50, lookups.p99, pings.p99));
  }
  std::string how = fmt::format("{} rounds x {} calls, interleaved with Ping", run.rounds, calls);
  const Target ratio_target{Target::Bound::kAtMost, 1.5, Target::Applies::kRatio};
  report.Add("lookup vs ping", "p50, median of rounds", Median(lookup_p50), "us")
      .WithBaseline(Median(ping_p50))
      .WithRatio(Median(ratio_p50))
      .WithTarget(ratio_target)
      .WithNote(how);
  report.Add("lookup vs ping", "p50 ratio, min of rounds", Min(ratio_p50), "x");
  report.Add("lookup vs ping", "p99, median of rounds", Median(lookup_p99), "us")
      .WithBaseline(Median(ping_p99))
      .WithRatio(Median(ratio_p99))
      .WithTarget(ratio_target)
      .WithNote(how);
  report.Add("lookup vs ping", "p99 ratio, min of rounds", Min(ratio_p99), "x");
  return Status::Ok();
}

struct QueryCase {
  explicit QueryCase(std::string text) : expression(std::move(text)) {}
  std::string expression;
  std::vector<double> millis;
  size_t rows = 0;
  Clock::duration spent{};
};

// The cases take turns, a slice of calls per round, like the other phases.
Status QueryPhase(Run& run, Report& report) {
  std::vector<QueryCase> cases = {
      QueryCase("role=worker"),  // dense: 999 of every 1000 threads
      QueryCase("role=merger"),  // sparse: 1 in 1000
      QueryCase("kind=thread and role=merger and shard=7"),
  };
  const int per_round = (run.options.query_calls + run.rounds - 1) / run.rounds;
  for (QueryCase& query : cases) {
    for (int i = 0; i < 3; ++i) {  // warm-up: first plans, first pages in cache
      TOCL_RETURN_IF_ERROR(run.client->Query(query.expression, kQueryLimit).status());
    }
  }
  for (int round = 0; round < run.rounds; ++round) {
    for (QueryCase& query : cases) {
      if (query.spent > kQueryCaseBudget) continue;
      for (int i = 0; i < per_round; ++i) {
        auto start = Clock::now();
        auto page = run.client->Query(query.expression, kQueryLimit);
        auto elapsed = Clock::now() - start;
        if (!page.ok()) return page.status().WithContext(query.expression);
        query.spent += elapsed;
        query.millis.push_back(std::chrono::duration<double, std::milli>(elapsed).count());
        query.rows = page->entities.size();
      }
    }
    Progress(fmt::format("query round {}/{} done", round + 1, run.rounds));
  }
  for (const QueryCase& query : cases) {
    Summary summary = Summarize(query.millis);
    std::string name = fmt::format("query '{}' limit {}", query.expression, kQueryLimit);
    std::string note = fmt::format("{} calls, {} rows each", summary.count, query.rows);
    if (query.spent > kQueryCaseBudget) note += ", stopped early: over the time budget";
    report.Add(name, "p50", summary.p50, "ms")
        .WithTarget({Target::Bound::kAtMost, 5})
        .WithNote(note);
    report.Add(name, "p99", summary.p99, "ms");
  }
  return Status::Ok();
}

void AddMemoryFigure(Run& run, Report& report, std::string metric, uint64_t idle_bytes) {
  auto rss = run.daemon->ResidentBytes();
  if (!rss.ok()) {
    Progress(fmt::format("cannot read the daemon's memory: {}", rss.status().ToString()));
    return;
  }
  report.Add("daemon memory", std::move(metric), static_cast<double>(*rss) / kMiB, "MiB")
      .WithBaseline(static_cast<double>(idle_bytes) / kMiB)
      .WithTarget({Target::Bound::kAtMost, 400})
      .WithNote(
          fmt::format("{} threads registered; baseline: the idle daemon", run.numbering.count()));
}

void AddStorageFigures(Run& run, Report& report, uint64_t idle_bytes) {
  if (auto peak = run.daemon->PeakResidentBytes(); peak.ok()) {
    report.Add("daemon memory", "VmHWM (peak RSS)", static_cast<double>(*peak) / kMiB, "MiB")
        .WithBaseline(static_cast<double>(idle_bytes) / kMiB);
  }
  std::string db = run.daemon->database_path();
  uint64_t daemon_bytes = DatabaseFileBytes(db);
  uint64_t baseline_bytes = DatabaseFileBytes(run.baseline->path());
  std::error_code error;
  uintmax_t wal_bytes = std::filesystem::file_size(db + "-wal", error);
  report.Add("database file", "size, db + wal", static_cast<double>(daemon_bytes) / kMiB, "MiB")
      .WithBaseline(static_cast<double>(baseline_bytes) / kMiB)
      .WithRatio(static_cast<double>(daemon_bytes) / static_cast<double>(baseline_bytes))
      .WithNote(fmt::format("wal {:.1f} MiB; baseline: the raw SQLite file",
                            error ? 0.0 : static_cast<double>(wal_bytes) / kMiB));
}

// Ending a session makes the daemon mark its process and all its threads
// exited, one write for half a million rows: worth knowing how long it takes.
void CloseSessions(Run& run, Report& report) {
  std::vector<BenchProcess*> processes;
  if (run.single) processes.push_back(run.single.get());
  for (auto& writer : run.writers) processes.push_back(writer.get());
  for (BenchProcess* process : processes) {
    uint64_t threads = process->next_thread - 1;
    auto start = Clock::now();
    Status closed = process->session->Close("benchmark finished");
    double seconds = SecondsSince(start);
    if (!closed.ok()) {
      Progress(
          fmt::format("closing {}: {}", process->session->gid().ToString(), closed.ToString()));
      continue;
    }
    if (process == run.single.get()) {
      report.Add("process exit", "close session", seconds * 1000, "ms")
          .WithNote(fmt::format("marks the process and its {} threads exited", threads));
    }
  }
}

}  // namespace

Status RunDirectoryBench(const DirectoryBenchOptions& options, Report& report) {
  // Declared before the run: the run's sessions close while the daemon still
  // serves, even when a phase fails.
  std::unique_ptr<DaemonProcess> own_daemon;
  Run run(options);
  run.rounds = std::max(options.repeats, kMinRounds);
  if (options.batch == 0 || options.writers < 1 || options.lookup_calls < 1 ||
      options.query_calls < 1) {
    return InvalidArgument("--batch, --writers and the call counts must be positive");
  }
  if (options.threads < uint64_t{2} * run.rounds * options.batch) {
    return InvalidArgument(fmt::format("--threads must be at least 2 x rounds x batch = {}",
                                       uint64_t{2} * run.rounds * options.batch));
  }

  if (options.daemon_address.empty()) {
    Progress(fmt::format("starting {}", options.toclsd_path));
    TOCL_ASSIGN_OR_RETURN(own_daemon, DaemonProcess::Start(options.toclsd_path));
    run.daemon = own_daemon.get();
    run.address = own_daemon->address();
  } else {
    run.address = options.daemon_address;
  }
  TOCL_ASSIGN_OR_RETURN(run.client, DirectoryClient::Connect(run.address));

  // The baseline file lives next to the daemon's database: same disk.
  std::string baseline_dir = run.daemon != nullptr
                                 ? run.daemon->state_dir()
                                 : std::filesystem::temp_directory_path().string();
  std::string baseline_path = fmt::format("{}/tocl-bench-baseline-{}.db", baseline_dir, ::getpid());
  TOCL_ASSIGN_OR_RETURN(run.baseline, SqliteBaseline::Create(baseline_path));
  struct RemoveBaseline {
    std::string path;
    ~RemoveBaseline() {
      std::error_code ignored;
      for (const char* suffix : {"", "-wal", "-shm"})
        std::filesystem::remove(path + suffix, ignored);
    }
  } remove_baseline{baseline_path};

  uint64_t idle_bytes = 0;
  if (run.daemon != nullptr) idle_bytes = run.daemon->ResidentBytes().value_or(0);

  Progress(fmt::format("registering {} threads in batches of {}, {} rounds", options.threads,
                       options.batch, run.rounds));
  TOCL_RETURN_IF_ERROR(RegisterPhase(run, report));
  if (run.daemon != nullptr) AddMemoryFigure(run, report, "VmRSS after registration", idle_bytes);
  TOCL_RETURN_IF_ERROR(LookupPhase(run, report));
  TOCL_RETURN_IF_ERROR(QueryPhase(run, report));
  if (run.daemon != nullptr) {
    AddMemoryFigure(run, report, "VmRSS after lookups and queries", idle_bytes);
    AddStorageFigures(run, report, idle_bytes);
  } else {
    Progress("memory and database size are measured only for a daemon tocl-bench started");
  }
  CloseSessions(run, report);
  if (own_daemon) TOCL_RETURN_IF_ERROR(own_daemon->Stop());
  return Status::Ok();
}

}  // namespace tocl::bench
