// Multicast across three hosts (issue #19 item 4): tocl-multicast-worker
// listeners on every host, a sender on host 1 mixing Multicasts and Sends
// to the same eight receivers. Each receiver checks that the messages come
// in the order they were sent; the sender checks every outcome and how many
// copies it sent (one per other host, not one per receiver).
//
// Every wait is a read with a deadline; nothing sleeps.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "catch_failure_listener.h"
#include "netns_cluster.h"
#include "netns_skip.h"
#include "worker_lines.h"

namespace tocl::testing {
namespace {

using std::chrono::seconds;

const std::string kWorker = TOCL_MULTICAST_WORKER_PATH;

// Three hosts, one network, unlimited.
std::unique_ptr<NetnsCluster> MustCreate() {
  NetnsClusterOptions options;
  options.hosts = 3;
  options.networks = std::vector<NetnsLinkSpec>(1);
  auto cluster = NetnsCluster::Create(std::move(options));
  INFO("NetnsCluster::Create -> " << cluster.status().ToString());
  REQUIRE(cluster.ok());
  return std::move(cluster).value();
}

LongWorker MustStart(NetnsCluster& cluster, int host, std::vector<std::string> args) {
  auto worker = LongWorker::StartProgram(cluster, host, kWorker, std::move(args), "ready");
  INFO(worker.status().ToString());
  REQUIRE(worker.ok());
  return std::move(worker).value();
}

std::string MustFinish(LongWorker& worker, seconds timeout = seconds(120)) {
  auto code = worker.Wait(timeout);
  INFO(worker.Output());
  REQUIRE(code.ok());
  CHECK(*code == 0);
  return worker.Output();
}

// Eight receivers: two in one process on host 1 (the sender's host), three
// in two processes on host 2, three in one process on host 3.
struct Listeners {
  std::vector<LongWorker> workers;
  std::string to;  // "G,G,..."
  size_t count = 0;

  void Start(NetnsCluster& cluster) {
    const std::vector<std::pair<int, int>> layout{{1, 2}, {2, 2}, {2, 1}, {3, 3}};
    for (auto [host, threads] : layout) {
      workers.push_back(MustStart(cluster, host, {"listen", "--threads", std::to_string(threads)}));
      for (Gid gid : workers.back().gids()) {
        to += (to.empty() ? "" : ",") + gid.ToString();
        ++count;
      }
    }
    REQUIRE(count == 8);
  }
  // Every listener got `messages` in order and exits 0.
  void Finish(uint32_t messages) {
    for (LongWorker& worker : workers) {
      const std::string output = MustFinish(worker);
      const auto received = ParseWorkerEvents(output, "received");
      CHECK(received.size() == worker.gids().size());
      for (const WorkerEvent& event : received) CHECK(event.Number("count") == messages);
      CHECK(ParseWorkerEvents(output, "error").empty());
    }
  }
};

void RunInterleaved(NetnsCluster& cluster, size_t size, bool relay_local) {
  Listeners listeners;
  listeners.Start(cluster);
  const uint32_t rounds = 20;
  std::vector<std::string> args{"send",
                                "--to",
                                listeners.to,
                                "--rounds",
                                std::to_string(rounds),
                                "--size",
                                std::to_string(size)};
  if (relay_local) args.push_back("--relay-local");
  LongWorker sender = MustStart(cluster, 1, args);
  const std::string output = MustFinish(sender);
  const auto multicasts = ParseWorkerEvents(output, "multicast");
  REQUIRE(multicasts.size() == rounds / 2);
  for (const WorkerEvent& event : multicasts) {
    INFO(output);
    CHECK(event.Number("delivered") == 8);
    CHECK(event.Number("receivers") == 8);
    // Without relay_local: two shm copies on host 1, one copy each to the
    // relays of hosts 2 and 3. With it: the groups of hosts 1, 2, 3 in a
    // binomial tree: host 1's relay (passing it on to host 2's) and host 3's.
    CHECK(event.Number("copies") == (relay_local ? 2u : 4u));
  }
  CHECK(ParseWorkerEvents(output, "outcome").empty());
  listeners.Finish(rounds);
}

TEST_CASE("netns multicast: short messages to eight receivers on three hosts keep each one's order",
          "[netns][multicast]") {
  TOCL_SKIP_WITHOUT_NETNS();
  auto cluster = MustCreate();
  RunInterleaved(*cluster, 1000, /*relay_local=*/false);
}

TEST_CASE("netns multicast: long messages through a tree of relays keep each receiver's order",
          "[netns][multicast]") {
  TOCL_SKIP_WITHOUT_NETNS();
  auto cluster = MustCreate();
  RunInterleaved(*cluster, 300 * 1024, /*relay_local=*/true);
}

}  // namespace
}  // namespace tocl::testing
