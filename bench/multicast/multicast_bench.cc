#include "multicast/multicast_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "netns_cluster.h"
#include "stats.h"
#include "worker_lines.h"

#ifndef TOCL_MULTICAST_WORKER_PATH
#define TOCL_MULTICAST_WORKER_PATH "tocl-multicast-worker"
#endif

namespace tocl::bench {
namespace {

using std::chrono::seconds;
using testing::LongWorker;
using testing::NetnsCluster;
using testing::NetnsClusterOptions;
using testing::NetnsLinkSpec;
using testing::WorkerEvent;

constexpr int kSenderHost = 1;

Result<LongWorker> StartWorker(NetnsCluster& cluster, int host, std::vector<std::string> args) {
  return LongWorker::StartProgram(cluster, host, TOCL_MULTICAST_WORKER_PATH, std::move(args),
                                  "ready", std::chrono::seconds(60));
}

Status Finished(LongWorker& worker, const std::string& who) {
  auto code = worker.Wait(seconds(600));
  if (!code.ok() || *code != 0) {
    return Internal(fmt::format(
        "{} failed ({}): {}", who,
        code.ok() ? fmt::format("exit {}", *code) : code.status().ToString(), worker.Output()));
  }
  return Status::Ok();
}

}  // namespace

Status RunMulticastBench(const MulticastBenchOptions& options, Report& report) {
  if (auto why = NetnsCluster::Unsupported()) {
    fmt::print(stderr, "multicast: skipped: {}\n", *why);
    return Status::Ok();
  }
  const int rounds = options.quick ? 5 : std::max(options.repeats, 5);
  NetnsClusterOptions cluster_options;
  cluster_options.hosts = 3;
  cluster_options.networks = {NetnsLinkSpec{options.rate}};
  if (!options.toclsd_path.empty()) cluster_options.toclsd_path = options.toclsd_path;
  TOCL_ASSIGN_OR_RETURN(std::unique_ptr<NetnsCluster> cluster,
                        NetnsCluster::Create(std::move(cluster_options)));

  // 8 receivers: two processes of two threads on each of hosts 2 and 3.
  std::vector<LongWorker> listeners;
  std::string to;
  for (int host : {2, 2, 3, 3}) {
    TOCL_ASSIGN_OR_RETURN(LongWorker listener,
                          StartWorker(*cluster, host, {"listen", "--threads", "2"}));
    for (Gid gid : listener.gids()) to += (to.empty() ? "" : ",") + gid.ToString();
    listeners.push_back(std::move(listener));
  }
  fmt::print(stderr, "multicast: {} rounds of {} bytes to {}\n", rounds, options.message_bytes, to);
  TOCL_ASSIGN_OR_RETURN(
      LongWorker sender,
      StartWorker(*cluster, kSenderHost,
                  {"send", "--mode", "bench", "--to", to, "--rounds", std::to_string(rounds),
                   "--size", std::to_string(options.message_bytes)}));
  TOCL_RETURN_IF_ERROR(Finished(sender, "the sender"));
  for (size_t i = 0; i < listeners.size(); ++i) {
    TOCL_RETURN_IF_ERROR(Finished(listeners[i], fmt::format("listener {}", i)));
  }

  std::vector<double> multicast_ms, sends_ms, ratio_time, multicast_tx, sends_tx, ratio_tx;
  std::vector<double> copies, sends_copies;
  std::vector<WorkerEvent> ops = sender.Events("op");
  for (int round = 0; round < rounds; ++round) {
    const WorkerEvent* multicast = nullptr;
    const WorkerEvent* sends = nullptr;
    for (const WorkerEvent& op : ops) {
      if (op.Number("round") != static_cast<uint64_t>(round)) continue;
      (op.Field("kind") == "multicast" ? multicast : sends) = &op;
    }
    if (multicast == nullptr || sends == nullptr) {
      return Internal(
          fmt::format("round {} is missing from the sender's output: {}", round, sender.Output()));
    }
    multicast_ms.push_back(multicast->Real("us") / 1000);
    sends_ms.push_back(sends->Real("us") / 1000);
    ratio_time.push_back(multicast_ms.back() / sends_ms.back());
    multicast_tx.push_back(multicast->Real("tx") / 1e6);
    sends_tx.push_back(sends->Real("tx") / 1e6);
    ratio_tx.push_back(multicast_tx.back() / std::max(sends_tx.back(), 1e-9));
    copies.push_back(multicast->Real("copies"));
    sends_copies.push_back(sends->Real("copies"));
  }
  const std::string note = fmt::format("{} rounds, 8 receivers on 2 other hosts, {}", rounds,
                                       options.rate.empty() ? "unlimited veth" : options.rate);
  const std::string name = "1 MiB to 8 receivers: Multicast vs 8 Sends";
  report.Add(name, "time median", Median(multicast_ms), "ms")
      .WithBaseline(Median(sends_ms))
      .WithRatio(Median(ratio_time))
      .WithNote(note);
  report.Add(name, "time min", Min(multicast_ms), "ms")
      .WithBaseline(Min(sends_ms))
      .WithRatio(Min(multicast_ms) / Min(sends_ms));
  report.Add(name, "sender host tx median", Median(multicast_tx), "MB")
      .WithBaseline(Median(sends_tx))
      .WithRatio(Median(ratio_tx))
      .WithNote("bytes host 1's interfaces sent during the call (/proc/net/dev)");
  // Both as the worker printed them (the Sends': one per receiver it sent to).
  report.Add(name, "copies from the sender", Median(copies), "copies")
      .WithBaseline(Median(sends_copies));
  return Status::Ok();
}

}  // namespace tocl::bench
