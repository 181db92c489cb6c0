// The via network between hosts (issue #6): tocl-long-worker on two hosts
// of a netns cluster (each host a network namespace with its own toclsd,
// joined by two veth networks), with tcp on eth0 and via (the sockets
// provider: VIA over TCP) on eth1 as the two rails of the fragment
// scheduler, and via alone on eth0.
//
// A 64 MiB message whose fragments cross both networks; long and short
// messages interleaved from four threads; short messages of every size
// class over via alone, with the receiver's VI pool (one VI per class,
// connected, with credits) as it prints it and as its daemon has it; via
// cut mid-message, the message completed over tcp exactly once.
//
// The test waits on what the workers print (helpers/long_worker.cc) and on
// conditions polled with deadlines; it never sleeps.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "catch_failure_listener.h"
#include "long_worker_checks.h"
#include "netns_cluster.h"
#include "netns_skip.h"
#include "tocl/directory_client.h"
#include "tocl/network_stats.h"
#include "worker_lines.h"

namespace tocl::testing {
namespace {

using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

// tcp on network 0 (which also carries the daemons), via on network 1.
const std::string kTcpAndVia = "tcp:eth0,via:eth1";

// Longest a whole worker run may take (the slowest case needs ~10 s).
constexpr auto kRunTimeout = seconds(60);

std::unique_ptr<NetnsCluster> MustCreate(NetnsClusterOptions options = {}) {
  return MustCreateFailoverCluster(std::move(options));
}

LongWorker MustStart(NetnsCluster& cluster, int host, std::vector<std::string> args,
                     const std::string& ready_event, const std::string& networks,
                     bool pipe_stdin = false) {
  return MustStartWorker(cluster, host, std::move(args), ready_event, pipe_stdin, networks);
}

void RequireSuccess(LongWorker& sender, LongWorker& receiver, bool sender_paused = false) {
  testing::RequireSuccess(sender, receiver, kRunTimeout, sender_paused);
}

// The worker's "vi" lines for one peer process, by size class (bytes); a
// class listed twice is kept twice.
std::multimap<uint64_t, WorkerEvent> Vis(const LongWorker& worker, Gid peer_process) {
  std::multimap<uint64_t, WorkerEvent> vis;
  for (const WorkerEvent& vi : worker.Events("vi")) {
    if (vi.Field("peer") == peer_process.ToString()) vis.emplace(vi.Number("class"), vi);
  }
  return vis;
}

// The tcp network on eth0 and the via network on eth1, as the worker names
// them.
void CheckTcpAndVia(WorkerNetworks& networks) {
  REQUIRE(networks.network.count("eth0") == 1);
  REQUIRE(networks.network.count("eth1") == 1);
  CHECK(networks.network["eth0"].Field("kind") == "tcp");
  CHECK(networks.network["eth0"].Field("name") == "tcp");
  CHECK(networks.network["eth1"].Field("kind") == "via");
  CHECK(networks.network["eth1"].Field("name") == "via");
  CHECK(networks.network["eth1"].Field("provider") == "sockets");
  CHECK(networks.network.size() == 2);
}

TEST_CASE("a 64 MiB message crosses tcp and via between two hosts with its SHA-256 intact",
          "[netns][via]") {
  TOCL_SKIP_WITHOUT_NETNS();
  auto cluster = MustCreate();
  LongWorker receiver = MustStart(*cluster, 2, {"recv", "--into", "64M"}, "ready", kTcpAndVia);
  LongWorker sender = MustStart(
      *cluster, 1, {"send", "--to", receiver.GidList(), "--plan", "64M", "--pause-before-exit"},
      "gid", kTcpAndVia, /*pipe_stdin=*/true);
  RequireSuccess(sender, receiver, /*sender_paused=*/true);

  INFO(Outputs(sender, receiver));
  auto sent = sender.Events("sent");
  auto got = receiver.Events("got");
  REQUIRE(sent.size() == 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].Number("bytes") == uint64_t{64} << 20);
  CHECK(got[0].Field("from") == sender.gids()[0].ToString());
  CHECK(got[0].Field("sha256") == sent[0].Field("sha256"));
  CHECK(sent[0].Field("sha256").size() == 64);

  // Both rails carried fragments, none had to be sent again.
  WorkerNetworks networks = Networks(sender, receiver.gids()[0].process());
  CheckTcpAndVia(networks);
  for (const std::string device : {"eth0", "eth1"}) {
    INFO(device);
    REQUIRE(networks.peer.count(device) == 1);
    CHECK(networks.peer[device].Number("sent") > 0);
    CHECK(networks.peer[device].Number("resent") == 0);
    CHECK(networks.peer[device].Field("failed") == "0");
    CHECK(networks.network[device].Number("failures") == 0);
  }
  // The receiver saw the via fragments come in on its VI of the largest
  // class (fragments fill short messages), from the sender.
  const auto vis = Vis(receiver, sender.gids()[0].process());
  REQUIRE(vis.count(64 << 10) == 1);
  const WorkerEvent& largest = vis.find(64 << 10)->second;
  CHECK(largest.Field("state") == "connected");
  CHECK(largest.Number("received") > 0);
}

TEST_CASE(
    "long and short messages interleaved from four threads over tcp and via arrive in order "
    "and intact",
    "[netns][via]") {
  TOCL_SKIP_WITHOUT_NETNS();
  auto cluster = MustCreate();
  constexpr int kThreads = 4;
  constexpr uint64_t kMessages = 40;  // per thread: about 10 of 1..8 MiB, the rest 100 B..64 KiB
  LongWorker receiver = MustStart(*cluster, 2, {"recv", "--threads", "4"}, "ready", kTcpAndVia);
  REQUIRE(receiver.gids().size() == kThreads);
  LongWorker sender = MustStart(*cluster, 1,
                                {"send", "--threads", "4", "--to", receiver.GidList(), "--plan",
                                 "mix" + std::to_string(kMessages)},
                                "gid", kTcpAndVia);
  RequireSuccess(sender, receiver);

  CheckInterleavedArrival(sender, receiver, kThreads, kMessages);

  WorkerNetworks networks = Networks(sender, receiver.gids()[0].process());
  CheckTcpAndVia(networks);
  for (const std::string device : {"eth0", "eth1"}) {
    INFO(device);
    REQUIRE(networks.peer.count(device) == 1);
    CHECK(networks.peer[device].Number("sent") > 0);
    CHECK(networks.network[device].Number("failures") == 0);
  }
}

TEST_CASE(
    "via alone between two hosts: short messages of every size class arrive intact, one VI "
    "per class",
    "[netns][via]") {
  TOCL_SKIP_WITHOUT_NETNS();
  auto cluster = MustCreate();
  // Per size class (256 B .. 64 KiB with the 64-byte frame header) its
  // smallest payload once and its largest 20 times, more than the 8
  // descriptors a 64 KiB VI posts: the credits must come back.
  constexpr int kRepeat = 20;
  const std::vector<uint64_t> class_bytes = {256,     512,      1 << 10,  2 << 10, 4 << 10,
                                             8 << 10, 16 << 10, 32 << 10, 64 << 10};
  std::string plan;
  for (uint64_t bytes : class_bytes) {
    const uint64_t smallest = bytes == 256 ? 64 : bytes / 2 - 63;
    plan += (plan.empty() ? "" : ",") + std::to_string(smallest) + "," + std::to_string(kRepeat) +
            "x" + std::to_string(bytes - 64);
  }
  const uint64_t messages = class_bytes.size() * (kRepeat + 1);
  // Both stay up after their last message until the test has seen the
  // receiver's VI pool as its daemon has it (`tocl networks`).
  LongWorker receiver = MustStart(*cluster, 2, {"recv", "--pause-before-exit"}, "ready", "via:eth0",
                                  /*pipe_stdin=*/true);
  LongWorker sender = MustStart(
      *cluster, 1, {"send", "--to", receiver.GidList(), "--plan", plan, "--pause-before-exit"},
      "gid", "via:eth0", /*pipe_stdin=*/true);
  const Gid sender_process = sender.gids()[0].process();
  const Gid receiver_process = receiver.gids()[0].process();
  REQUIRE_SHOWING(receiver.WaitFor("paused", {}, kRunTimeout).has_value(), sender, receiver);

  // The daemon of host 2 gets the receiver's statistics every 2 s
  // (RuntimeOptions::stats_interval): its VIs to the sender, one per class,
  // all connected.
  auto client = DirectoryClient::Connect(cluster->DaemonSocket(2));
  REQUIRE(client.ok());
  std::string reported = "no report";
  std::set<uint32_t> connected_classes;
  const bool daemon_has_pool = WaitUntil(
      [&] {
        auto stats = (*client)->NetworkStats(receiver_process);
        if (!stats.ok() || stats->size() != 1) {
          reported =
              stats.ok() ? fmt::format("{} processes", stats->size()) : stats.status().ToString();
          return false;
        }
        reported.clear();
        connected_classes.clear();
        for (const NetworkStats& network : stats->front().networks) {
          reported += fmt::format("network {} kind {} provider {} vis {}; ", network.name,
                                  network.kind, network.provider, network.vis.size());
          for (const ViStats& vi : network.vis) {
            if (network.kind == "via" && network.provider == "sockets" &&
                vi.peer == sender_process && vi.state == "connected" && vi.credits > 0 &&
                vi.received >= kRepeat + 1) {
              connected_classes.insert(vi.class_bytes);
            }
          }
        }
        return connected_classes.size() == class_bytes.size();
      },
      seconds(15));
  INFO("the daemon's report of " << receiver_process.ToString() << ": " << reported);
  CHECK(daemon_has_pool);

  receiver.Go();
  RequireSuccess(sender, receiver, /*sender_paused=*/true);

  INFO(Outputs(sender, receiver));
  const auto digests = SentDigests(sender);
  REQUIRE(digests.size() == messages);
  auto got = receiver.Events("got");
  REQUIRE(got.size() == messages);
  for (uint64_t seq = 0; seq < messages; ++seq) {
    INFO("seq " << seq);
    CHECK(got[seq].Number("seq") == seq);
    CHECK(got[seq].Field("sha256") == digests.at("0/" + std::to_string(seq)));
  }
  auto finished = receiver.Events("finished");
  REQUIRE(finished.size() == 1);
  CHECK(finished[0].Number("count") == messages);

  // Both run via only, over the sockets provider.
  for (const LongWorker* worker : {&sender, &receiver}) {
    auto networks = worker->Events("network");
    REQUIRE(networks.size() == 1);
    CHECK(networks[0].Field("name") == "via");
    CHECK(networks[0].Field("kind") == "via");
    CHECK(networks[0].Field("device") == "eth0");
    CHECK(networks[0].Field("provider") == "sockets");
  }

  // The receiver's VI pool, read while the sender still runs: one VI per
  // class to the sender, connected, each with credits to send on and
  // having received that class's messages.
  const auto vis = Vis(receiver, sender_process);
  CHECK(vis.size() == class_bytes.size());
  for (uint64_t bytes : class_bytes) {
    INFO("class " << bytes);
    REQUIRE(vis.count(bytes) == 1);
    const WorkerEvent& vi = vis.find(bytes)->second;
    CHECK(vi.Field("state") == "connected");
    CHECK(vi.Number("credits") > 0);
    CHECK(vi.Number("posted") > 0);
    CHECK(vi.Number("received") >= kRepeat + 1);
  }
  // And the sender's, read once its last Send returned: the same VIs, each
  // holding its class's messages, posted or still queued (a VI may still be
  // connecting then, or waiting for credits).
  const auto sender_vis = Vis(sender, receiver_process);
  CHECK(sender_vis.size() == class_bytes.size());
  for (uint64_t bytes : class_bytes) {
    INFO("sender's class " << bytes);
    REQUIRE(sender_vis.count(bytes) == 1);
    const WorkerEvent& vi = sender_vis.find(bytes)->second;
    CHECK(vi.Number("sent") + vi.Number("queued") >= kRepeat + 1);
  }
}

TEST_CASE(
    "via goes down mid-message: the message arrives intact over tcp, exactly once, and via is "
    "failed for the peer",
    "[netns][via]") {
  TOCL_SKIP_WITHOUT_NETNS();
  NetnsClusterOptions options;
  options.networks = {{"200mbit"}, {"200mbit"}};  // 128 MiB take a few seconds
  auto cluster = MustCreate(options);
  LongWorker receiver = MustStart(*cluster, 2, {"recv"}, "ready", kTcpAndVia);
  LongWorker sender = MustStart(*cluster, 1,
                                {"send", "--to", receiver.GidList(), "--plan", "128M",
                                 "--progress-ms", "20", "--pause-before-end"},
                                "gid", kTcpAndVia, /*pipe_stdin=*/true);
  // An eighth of the message on its way: host 1 loses network 1 (via).
  REQUIRE_SHOWING(
      sender.WaitUntilOrExit([&] { return BytesSent(sender) >= (16 << 20); }, seconds(30)), sender,
      receiver);
  REQUIRE_SHOWING(sender.Events("sent").empty(), sender, receiver);
  REQUIRE(cluster->SetLink(1, 1, false).ok());
  const auto down_at = Clock::now();

  auto sent = sender.WaitFor("sent", {}, kRunTimeout);
  REQUIRE_SHOWING(sent.has_value(), sender, receiver);
  const double after_down = std::chrono::duration<double>(Clock::now() - down_at).count();
  WARN("128 MiB sent in " << sent->Field("seconds") << " s, " << after_down
                          << " s of them with tcp alone");
  // via back before the end marker: fragments its VI held back arrive late
  // and must not make a second message.
  REQUIRE(cluster->SetLink(1, 1, true).ok());
  sender.Go();
  RequireSuccess(sender, receiver);

  INFO(Outputs(sender, receiver));
  auto got = receiver.Events("got");
  REQUIRE(got.size() == 1);
  CHECK(got[0].Field("sha256") == sent->Field("sha256"));
  CHECK(got[0].Number("bytes") == uint64_t{128} << 20);
  auto finished = receiver.Events("finished");
  REQUIRE(finished.size() == 1);
  CHECK(finished[0].Number("count") == 1);

  WorkerNetworks networks = Networks(sender, receiver.gids()[0].process());
  CheckTcpAndVia(networks);
  REQUIRE(networks.peer.count("eth0") == 1);
  REQUIRE(networks.peer.count("eth1") == 1);
  CHECK(networks.network["eth1"].Number("failures") >= 1);
  CHECK(networks.peer["eth1"].Field("failed") == "1");
  CHECK(networks.peer["eth1"].Number("sent") > 0);
  CHECK(networks.peer["eth0"].Field("failed") == "0");
  CHECK(networks.peer["eth0"].Number("resent") > 0);
  CHECK(networks.network["eth0"].Number("failures") == 0);
}

}  // namespace
}  // namespace tocl::testing
