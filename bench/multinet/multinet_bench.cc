#include "multinet/multinet_bench.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "netns_cluster.h"
#include "stats.h"

#ifndef TOCL_MULTINET_RAW_PATH
#define TOCL_MULTINET_RAW_PATH "tocl-multinet-raw"
#endif
#ifndef TOCL_MULTINET_PEER_PATH
#define TOCL_MULTINET_PEER_PATH "tocl-multinet-peer"
#endif

namespace tocl::bench {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::ChildProcess;
using testing::NetnsCluster;
using testing::NetnsLinkSpec;

constexpr int kSender = 1;
constexpr int kReceiver = 2;
constexpr int kRawPort = 5201;
constexpr uint64_t kWarmupMessages = 1;
// An unlimited veth is assumed this fast when sizing its runs.
constexpr double kUnlimitedMbit = 5'000;

enum class Contender { kRaw, kTocl };

struct Entry {
  std::string label;
  Contender contender;
  std::vector<int> networks;   // the networks it uses: {0} or {0, 1}
  std::vector<double> values;  // Mbit/s, one per round
};

struct Row {
  std::string case_name;
  size_t entry;
  std::optional<size_t> reference;  // an entry of the same round...
  std::optional<double> constant;   // ...or a fixed baseline in Mbit/s
  std::string baseline_label;
  std::optional<Target> target;
};

struct Group {
  std::string name;
  std::vector<NetnsLinkSpec> links = {};  // one per network
  std::vector<Entry> entries = {};
  std::vector<Row> rows = {};
  uint64_t count = 0;  // measured messages per run
};

struct Run {
  const MultinetBenchOptions& options;
  NetnsCluster& cluster;
  int rounds;
};

std::string ToclNetworks(const NetnsCluster& cluster, const std::vector<int>& networks) {
  std::vector<std::string> names;
  for (int m : networks) names.push_back("tcp:" + cluster.Interface(kSender, m));
  return fmt::format("{}", fmt::join(names, ","));
}

double RateMbit(const NetnsLinkSpec& link) {
  if (link.rate.empty()) return kUnlimitedMbit;
  return static_cast<double>(testing::ParseTcRate(link.rate).value_or(0)) / 1e6;
}

// Messages per measured run: about `run_seconds` of traffic at the rate of the
// group's networks together (at least 2).
uint64_t MessagesPerRun(const std::vector<NetnsLinkSpec>& links, uint64_t bytes,
                        double run_seconds) {
  double mbit = 0;
  for (const NetnsLinkSpec& link : links) mbit += RateMbit(link);
  double messages = run_seconds * mbit * 1e6 / 8 / static_cast<double>(bytes);
  return std::max<uint64_t>(2, static_cast<uint64_t>(messages + 0.5));
}

// "seconds S bytes B" -> Mbit/s.
Result<double> ParseThroughput(const std::string& output) {
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    double took = 0;
    unsigned long long bytes = 0;
    if (std::sscanf(line.c_str(), "seconds %lf bytes %llu", &took, &bytes) == 2 && took > 0) {
      return static_cast<double>(bytes) * 8 / took / 1e6;
    }
  }
  return Internal(fmt::format("no 'seconds S bytes B' line in the sender's output: {}", output));
}

// Waits until the receiver printed a line starting with `marker`; the rest
// of the line.
Result<std::string> WaitForLine(ChildProcess& receiver, const std::string& marker,
                                milliseconds timeout) {
  std::string found;
  bool ready = testing::WaitUntil(
      [&] {
        std::istringstream lines(receiver.Output());
        std::string line;
        while (std::getline(lines, line)) {
          if (line.rfind(marker, 0) == 0) {
            found = line.substr(marker.size());
            return true;
          }
        }
        return receiver.Exited();
      },
      timeout, milliseconds(5));
  if (ready && !receiver.Exited()) return found;
  return Unavailable(fmt::format("the receiver did not print '{}' ({}): {}", marker,
                                 receiver.Exited() ? "it exited" : "timed out", receiver.Output()));
}

// One run of `entry`: `count` messages after the warm-up; Mbit/s.
Result<double> RunEntry(Run& run, const Entry& entry, uint64_t count) {
  const uint64_t bytes = run.options.message_bytes;
  // Generous: 20 Mbit/s at worst, plus start-up.
  const milliseconds timeout(60'000 +
                             static_cast<int64_t>(bytes * (count + kWarmupMessages) * 8 / 20'000));
  const std::vector<std::string> sizes = {std::to_string(bytes), std::to_string(kWarmupMessages),
                                          std::to_string(count)};
  std::optional<ChildProcess> receiver;
  Result<std::string> sent = std::string();
  if (entry.contender == Contender::kRaw) {
    const std::string address =
        fmt::format("{}:{}", run.cluster.Address(kReceiver, entry.networks.front()), kRawPort);
    TOCL_ASSIGN_OR_RETURN(ChildProcess child,
                          run.cluster.Spawn(kReceiver, {TOCL_MULTINET_RAW_PATH, "recv", address}));
    receiver = std::move(child);
    TOCL_RETURN_IF_ERROR(WaitForLine(*receiver, "listening", seconds(10)).status());
    std::vector<std::string> argv = {TOCL_MULTINET_RAW_PATH, "send", address};
    argv.insert(argv.end(), sizes.begin(), sizes.end());
    sent = run.cluster.Exec(kSender, argv, timeout);
  } else {
    const testing::EnvList env = {{"TOCL_NETWORKS", ToclNetworks(run.cluster, entry.networks)}};
    std::vector<std::string> argv = {TOCL_MULTINET_PEER_PATH, "recv"};
    argv.insert(argv.end(), sizes.begin(), sizes.end());
    TOCL_ASSIGN_OR_RETURN(ChildProcess child, run.cluster.Spawn(kReceiver, argv, env));
    receiver = std::move(child);
    TOCL_ASSIGN_OR_RETURN(std::string gid, WaitForLine(*receiver, "gid ", seconds(30)));
    argv = {TOCL_MULTINET_PEER_PATH, "send", gid};
    argv.insert(argv.end(), sizes.begin(), sizes.end());
    sent = run.cluster.Exec(kSender, argv, timeout, env);
  }
  if (!sent.ok()) {
    return sent.status().WithContext(
        fmt::format("{} (receiver said: {})", entry.label, receiver->Output()));
  }
  Result<int> received = receiver->Wait(seconds(30));
  if (!received.ok() || *received != 0) {
    return Internal(fmt::format("{}: the receiver {}: {}", entry.label,
                                received.ok() ? testing::ExitStatusText(*received) : "did not exit",
                                receiver->Output()));
  }
  return ParseThroughput(*sent);
}

Status RunGroup(Run& run, Group& group) {
  for (int m = 0; m < static_cast<int>(group.links.size()); ++m) {
    TOCL_RETURN_IF_ERROR(run.cluster.Shape(m, group.links[static_cast<size_t>(m)]));
  }
  std::fprintf(stderr, "multinet: %s, %llu x %llu B per run\n", group.name.c_str(),
               static_cast<unsigned long long>(group.count),
               static_cast<unsigned long long>(run.options.message_bytes));
  // One unrecorded pass: connections, pools, the directory's caches.
  for (const Entry& entry : group.entries) TOCL_RETURN_IF_ERROR(RunEntry(run, entry, 1).status());
  for (int round = 0; round < run.rounds; ++round) {
    // A B, then B A: a drift of the machine hits both alike.
    std::vector<size_t> order(group.entries.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (round % 2 == 1) std::reverse(order.begin(), order.end());
    for (size_t index : order) {
      Entry& entry = group.entries[index];
      TOCL_ASSIGN_OR_RETURN(double mbit, RunEntry(run, entry, group.count));
      entry.values.push_back(mbit);
      std::fprintf(stderr, "multinet:   round %d/%d: %s %s Mbit/s\n", round + 1, run.rounds,
                   entry.label.c_str(), FormatNumber(mbit).c_str());
    }
  }
  return Status::Ok();
}

void AddRows(const Run& run, const Group& group, Report& report) {
  const std::string how = fmt::format("{} rounds x {} x {} MiB", run.rounds, group.count,
                                      run.options.message_bytes >> 20);
  for (const Row& row : group.rows) {
    const Entry& entry = group.entries[row.entry];
    if (!row.reference && !row.constant) {
      Figure& figure = report.Add(row.case_name, "throughput", Median(entry.values), "Mbit/s");
      figure.WithNote(how);
      if (row.target) figure.WithTarget(*row.target);
      continue;
    }
    std::vector<double> ratios;
    std::vector<double> baselines;
    for (size_t i = 0; i < entry.values.size(); ++i) {
      double baseline = row.constant ? *row.constant : group.entries[*row.reference].values.at(i);
      baselines.push_back(baseline);
      ratios.push_back(entry.values[i] / baseline);
    }
    Figure& figure = report.Add(row.case_name, "throughput", Median(entry.values), "Mbit/s")
                         .WithBaseline(Median(baselines))
                         .WithRatio(Median(ratios))
                         .WithNote(fmt::format("{}; baseline: {}", how, row.baseline_label));
    if (row.target) figure.WithTarget(*row.target);
    report.Add(row.case_name, "ratio, min of rounds", Min(ratios), "x")
        .WithNote(fmt::format("max {}", FormatNumber(Max(ratios))));
  }
}

// The case groups of bench/README.md. Entries measured in every round;
// rows say what is reported against what.
std::vector<Group> MakeGroups(const MultinetBenchOptions& options) {
  const double run_seconds = options.quick ? 0.4 : 2.0;
  const Target both_vs_one{Target::Bound::kAtLeast, 1.8, Target::Applies::kRatio};
  const Target of_sum{Target::Bound::kAtLeast, 0.9, Target::Applies::kRatio};
  std::vector<Group> groups;

  Group equal{.name = "equal rates, 2 x 500mbit", .links = {{"500mbit"}, {"500mbit"}}};
  equal.entries = {{"raw tcp, one network", Contender::kRaw, {0}, {}},
                   {"tocl, one network", Contender::kTocl, {0}, {}},
                   {"tocl, two networks", Contender::kTocl, {0, 1}, {}}};
  equal.rows = {
      {"2 x 500mbit: raw tcp, one network", 0, {}, 500.0, "the configured rate", {}},
      {"2 x 500mbit: tocl, one network", 1, 0, {}, "raw tcp, one network", {}},
      {"2 x 500mbit: tocl, two networks", 2, 1, {}, "tocl, one network", both_vs_one},
  };
  groups.push_back(std::move(equal));

  Group unequal{.name = "unequal rates, 600mbit + 200mbit", .links = {{"600mbit"}, {"200mbit"}}};
  unequal.entries = {{"raw tcp, the 600mbit network", Contender::kRaw, {0}, {}},
                     {"tocl, two networks", Contender::kTocl, {0, 1}, {}}};
  unequal.rows = {
      {"600 + 200mbit: raw tcp, the 600mbit network", 0, {}, 600.0, "the configured rate", {}},
      {"600 + 200mbit: tocl, two networks", 1, {}, 800.0, "the sum of the rates", of_sum},
  };
  groups.push_back(std::move(unequal));

  Group unlimited{.name = "unlimited veth", .links = {{""}, {""}}};
  unlimited.entries = {{"raw tcp, one network", Contender::kRaw, {0}, {}},
                       {"tocl, one network", Contender::kTocl, {0}, {}},
                       {"tocl, two networks", Contender::kTocl, {0, 1}, {}}};
  unlimited.rows = {
      {"unlimited veth: raw tcp, one network", 0, {}, {}, "", {}},
      {"unlimited veth: tocl, one network", 1, 0, {}, "raw tcp, one network", {}},
      {"unlimited veth: tocl, two networks", 2, 0, {}, "raw tcp, one network", {}},
  };
  groups.push_back(std::move(unlimited));

  for (Group& group : groups) {
    // Sized by the rate of one network: the slowest entry runs longest.
    group.count = MessagesPerRun({group.links.front()}, options.message_bytes, run_seconds);
    if (!options.baselines_only) continue;
    // Raw entries only, and the rows that need nothing else.
    std::vector<size_t> kept;
    std::vector<Entry> entries;
    for (size_t i = 0; i < group.entries.size(); ++i) {
      if (group.entries[i].contender == Contender::kRaw) {
        kept.push_back(i);
        entries.push_back(group.entries[i]);
      }
    }
    auto new_index = [&](size_t old) -> std::optional<size_t> {
      auto at = std::find(kept.begin(), kept.end(), old);
      if (at == kept.end()) return std::nullopt;
      return static_cast<size_t>(at - kept.begin());
    };
    std::vector<Row> rows;
    for (Row row : group.rows) {
      std::optional<size_t> entry = new_index(row.entry);
      if (!entry) continue;
      row.entry = *entry;
      if (row.reference) {
        row.reference = new_index(*row.reference);
        if (!row.reference) continue;
      }
      rows.push_back(row);
    }
    group.entries = std::move(entries);
    group.rows = std::move(rows);
  }
  return groups;
}

}  // namespace

Status RunMultinetBench(const MultinetBenchOptions& options, Report& report) {
  if (std::optional<std::string> why = NetnsCluster::Unsupported()) {
    std::fprintf(stderr, "tocl-bench multinet: skipped: %s\n", why->c_str());
    return Status::Ok();
  }
  testing::NetnsClusterOptions cluster_options;
  cluster_options.hosts = 2;
  cluster_options.networks = {{""}, {""}};
  cluster_options.toclsd_path = options.toclsd_path;
  cluster_options.daemon_log_level = "warn";
  TOCL_ASSIGN_OR_RETURN(std::unique_ptr<NetnsCluster> cluster,
                        NetnsCluster::Create(cluster_options));
  std::fprintf(stderr, "multinet: cluster\n%s", cluster->Describe().c_str());

  Run run{options, *cluster, std::max(5, options.repeats)};
  std::vector<Group> groups = MakeGroups(options);
  for (Group& group : groups) {
    TOCL_RETURN_IF_ERROR(RunGroup(run, group).WithContext(group.name));
    AddRows(run, group, report);
  }
  return Status::Ok();
}

}  // namespace tocl::bench
