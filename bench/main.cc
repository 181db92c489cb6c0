// tocl-bench: benchmarks of tocl against a real daemon (bench/README.md).
//
//   tocl-bench directory [--json] [--threads N] [--repeats R]
//   tocl-bench msg [--json] [--cases latency,bandwidth,...] [--network shm,tcp,via] [--quick]
//                  [--peers]
//                  [--repeats R]
//   tocl-bench multinet [--json] [--quick] [--repeats R] [--baselines-only]
//   tocl-bench multicast [--json] [--quick] [--repeats R] [--rate RATE]
//   tocl-bench directory --cluster [--json] [--threads N] [--repeats R]
//   tocl-bench spawn [--json] [--quick] [--repeats R]
//   tocl-bench notify [--json] [--quick] [--repeats R] [--kills N] [--cluster]
//   tocl-bench visibility [--json] [--cluster] [--samples N] [--repeats R]
//
// Prints an aligned table of figures; with --json, one JSON object per
// figure on stdout instead, and the table on stderr. Exit code 0 when the
// benchmark ran (whether or not it met its targets), 1 when it could not
// run, 2 on a usage error.
#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>

#include "cluster/cluster_directory_bench.h"
#include "cluster/spawn_bench.h"
#include "directory_bench.h"
#include "msg/msg_bench.h"
#include "multicast/multicast_bench.h"
#include "multinet/multinet_bench.h"
#include "notify/notify_bench.h"
#include "report.h"
#include "tocl/version.h"
#include "visibility_bench.h"

#ifndef TOCL_TOCLSD_PATH
#define TOCL_TOCLSD_PATH "toclsd"
#endif

namespace {

// Options every suite takes: where the daemon is and how to print.
struct CommonOptions {
  bool json = false;
  std::string toclsd_path = TOCL_TOCLSD_PATH;
  std::string daemon_address;
  int repeats = 5;
};

void AddCommonOptions(CLI::App& command, CommonOptions& options) {
  command.add_flag("--json", options.json,
                   "one JSON line per figure on stdout (the table goes to stderr)");
  command.add_option("--toclsd", options.toclsd_path, "the toclsd binary to start")
      ->capture_default_str();
  command.add_option("--daemon", options.daemon_address,
                     "measure an already running daemon at ADDR instead of starting one "
                     "(memory and database size are then not measured)");
  command
      .add_option("--repeats", options.repeats,
                  "rounds of interleaved baseline and measured runs (at least 5 are run)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
}

int Finish(const tocl::Status& status, const tocl::bench::Report& report, bool json) {
  if (!status.ok()) {
    fmt::print(stderr, "tocl-bench: {}\n", status.ToString());
    return 1;
  }
  if (json) {
    report.PrintTable(stderr);
    report.PrintJsonLines(stdout);
  } else {
    report.PrintTable(stdout);
  }
  return 0;
}

// Copies the common options into a suite's, runs it and prints its report.
// A suite that starts its own daemons (`own_daemons` names it for the
// message, else nullptr) refuses --daemon with a usage error.
template <typename Options>
int RunSuite(const std::string& suite, Options& options, const CommonOptions& common,
             tocl::Status (*run)(const Options&, tocl::bench::Report&),
             const char* own_daemons = nullptr) {
  if (own_daemons != nullptr && !common.daemon_address.empty()) {
    fmt::print(stderr, "tocl-bench: {} starts its own daemons; --daemon is not used\n",
               own_daemons);
    return 2;
  }
  options.repeats = common.repeats;
  options.toclsd_path = common.toclsd_path;
  if constexpr (requires { options.daemon_address; }) {
    options.daemon_address = common.daemon_address;
  }
  tocl::bench::Report report(suite);
  tocl::Status status = run(options, report);
  return Finish(status, report, common.json);
}

}  // namespace

int main(int argc, char** argv) {
  // stdout carries the figures (only JSON lines with --json). libtocl logs
  // to stderr by itself; the daemon's code the SQLite baseline shares
  // (directory/) logs through spdlog's default logger, which writes to
  // stdout: to stderr with it, beside the progress lines.
  spdlog::default_logger()->sinks() = {std::make_shared<spdlog::sinks::stderr_color_sink_mt>()};

  CLI::App app{"tocl-bench: benchmarks of tocl against a real toclsd"};
  app.set_version_flag("--version", "tocl-bench " TOCL_VERSION_STRING);
  app.require_subcommand(1);

  CommonOptions common;
  tocl::bench::DirectoryBenchOptions directory;
  CLI::App* directory_command =
      app.add_subcommand("directory", "thread registration, Lookup, Query and memory of toclsd");
  AddCommonOptions(*directory_command, common);
  directory_command->add_option("--threads", directory.threads, "threads to register in total")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{10'000'000}));
  directory_command->add_option("--batch", directory.batch, "threads per RegisterThreads call")
      ->capture_default_str()
      ->check(CLI::Range(1, 10'000));
  directory_command
      ->add_option("--writers", directory.writers,
                   "sessions registering at once in the concurrent case")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  directory_command
      ->add_option("--lookup-calls", directory.lookup_calls,
                   "Lookup calls (and as many Ping calls) per round")
      ->capture_default_str()
      ->check(CLI::Range(1, 1'000'000));
  directory_command
      ->add_option("--query-calls", directory.query_calls, "calls per query case over all rounds")
      ->capture_default_str()
      ->check(CLI::Range(1, 100'000));
  bool directory_cluster = false;
  directory_command->add_flag(
      "--cluster", directory_cluster,
      "three hosts in network namespaces (root): propagation, replication of --threads, reads "
      "on a replica");

  tocl::bench::MsgBenchOptions msg;
  int msg_run_ms = static_cast<int>(msg.run.count());
  int msg_warmup_ms = static_cast<int>(msg.warmup.count());
  double msg_idle_seconds = std::chrono::duration<double>(msg.idle).count();
  CLI::App* msg_command = app.add_subcommand(
      "msg", "message latency, bandwidth and rate between two processes, against raw baselines");
  AddCommonOptions(*msg_command, common);
  msg_command
      ->add_option(
          "--cases", msg.cases,
          "case groups to run, comma-separated: latency (shm and tcp), blocking, "
          "bandwidth, long, rate, rate64 (64 pairs of threads at once), threads (64 enrolled "
          "threads), idle (idle CPU), requests (Irecv + Wait), handlers (a handler replies), "
          "packed (16 values + 4 MiB, packed and placed by a header handler)")
      ->delimiter(',')
      ->check(CLI::IsMember(tocl::bench::MsgCaseNames()))
      ->capture_default_str();
  msg_command
      ->add_option("--network", msg.networks,
                   "tocl networks whose cases run, comma-separated: shm, tcp, via (tocl over via "
                   "next to tocl over tcp and raw tcp: latency, bandwidth, rate)")
      ->delimiter(',')
      ->check(CLI::IsMember(tocl::bench::MsgNetworkNames()))
      ->capture_default_str();
  msg_command->add_flag("--peers", msg.peers,
                        "also measure UCX (ucx_perftest) and Open MPI in the same rounds and print "
                        "tocl/peer ratios (deploy/install-bench-peers.sh installs them)");
  msg_command->add_flag("--quick", msg.quick,
                        "a smoke run: 30 ms runs, 1 s idle windows (figures are rough)");
  msg_command->add_flag("--baselines-only", msg.baselines_only,
                        "measure the raw baselines only; start no daemon and no tocl runtime");
  msg_command->add_option("--run-ms", msg_run_ms, "measured time of each run")
      ->capture_default_str()
      ->check(CLI::Range(1, 60'000));
  msg_command->add_option("--warmup-ms", msg_warmup_ms, "unmeasured traffic before each run")
      ->capture_default_str()
      ->check(CLI::Range(0, 60'000));
  msg_command
      ->add_option("--idle-seconds", msg_idle_seconds,
                   "length of each idle-CPU window (the 64-thread one and its baseline)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 600.0));

  tocl::bench::MultinetBenchOptions multinet;
  CLI::App* multinet_command = app.add_subcommand(
      "multinet",
      "16 MiB messages between two hosts in network namespaces over one and two networks, "
      "against raw TCP and the links' rates (needs root)");
  AddCommonOptions(*multinet_command, common);
  multinet_command->add_flag("--quick", multinet.quick,
                             "a smoke run: about 0.4 s of traffic per run (figures are rough)");
  multinet_command->add_flag("--baselines-only", multinet.baselines_only,
                             "measure raw TCP only; start no tocl peers");

  tocl::bench::MulticastBenchOptions multicast;
  CLI::App* multicast_command = app.add_subcommand(
      "multicast",
      "1 MiB to 8 receivers on 3 hosts in network namespaces: one Multicast against 8 Sends, "
      "time and bytes the sender's host sent (needs root)");
  AddCommonOptions(*multicast_command, common);
  multicast_command->add_flag("--quick", multicast.quick, "5 rounds: a smoke run");
  multicast_command->add_option("--rate", multicast.rate,
                                "the network's tc rate (e.g. 1gbit); unlimited when empty");

  tocl::bench::SpawnBenchOptions spawn;
  CLI::App* spawn_command = app.add_subcommand(
      "spawn",
      "remote thread and process spawn latency between two hosts in network namespaces (root)");
  AddCommonOptions(*spawn_command, common);
  spawn_command->add_flag("--quick", spawn.quick, "fewer samples: a smoke run");

  tocl::bench::NotifyBenchOptions notify;
  CLI::App* notify_command = app.add_subcommand(
      "notify",
      "exit notices (Runtime::Notify) after kill -9: callback and message, against a pidfd and "
      "the daemons' Watch streams");
  AddCommonOptions(*notify_command, common);
  notify_command->add_flag("--quick", notify.quick, "6 kills per round: a smoke run");
  notify_command->add_option("--kills", notify.kills, "processes killed per round")
      ->capture_default_str()
      ->check(CLI::Range(2, 10'000));
  notify_command->add_flag(
      "--cluster", notify.cluster,
      "two hosts in network namespaces (root): the target on h2, the watcher on h1");
  tocl::bench::VisibilityBenchOptions visibility;
  CLI::App* visibility_command = app.add_subcommand(
      "visibility",
      "how soon a thread EnrollThread returned is returned by a Query: on the same host, and "
      "with --cluster on another host of a netns cluster (root)");
  AddCommonOptions(*visibility_command, common);
  visibility_command->add_option("--samples", visibility.samples, "threads per case and round")
      ->capture_default_str()
      ->check(CLI::Range(1, 100'000));
  visibility_command->add_flag("--cluster", visibility.cluster,
                               "two hosts in network namespaces (root): the same host and another");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    int code = app.exit(error);
    return code == 0 ? 0 : 2;
  }

  if (directory_command->parsed() && directory_cluster) {
    tocl::bench::ClusterDirectoryBenchOptions cluster;
    cluster.threads = directory.threads;
    cluster.batch = static_cast<uint32_t>(directory.batch);
    return RunSuite("directory-cluster", cluster, common, tocl::bench::RunClusterDirectoryBench);
  }
  if (visibility_command->parsed()) {
    return RunSuite("visibility", visibility, common, tocl::bench::RunVisibilityBench,
                    visibility.cluster ? "visibility --cluster" : nullptr);
  }
  if (spawn_command->parsed()) {
    return RunSuite("spawn", spawn, common, tocl::bench::RunSpawnBench);
  }
  if (notify_command->parsed()) {
    return RunSuite("notify", notify, common, tocl::bench::RunNotifyBench, "notify");
  }
  if (directory_command->parsed()) {
    return RunSuite("directory", directory, common, tocl::bench::RunDirectoryBench);
  }
  if (msg_command->parsed()) {
    msg.run = std::chrono::milliseconds(msg_run_ms);
    msg.warmup = std::chrono::milliseconds(msg_warmup_ms);
    msg.idle = std::chrono::milliseconds(static_cast<int64_t>(msg_idle_seconds * 1000));
    return RunSuite("msg", msg, common, tocl::bench::RunMsgBench);
  }
  if (multicast_command->parsed()) {
    return RunSuite("multicast", multicast, common, tocl::bench::RunMulticastBench, "multicast");
  }
  if (multinet_command->parsed()) {
    return RunSuite("multinet", multinet, common, tocl::bench::RunMultinetBench, "multinet");
  }
  return 2;
}
