// Multicast across three hosts (issue #19 item 4): tocl-multicast-worker
// listeners on every host, a sender on host 1 mixing Multicasts and Sends
// to the same eight receivers. Each receiver checks that the messages come
// in the order they were sent; the sender checks every outcome and how many
// copies it sent (one per other host, not one per receiver). And a relay
// that dies after it passed a long message on down the tree.
//
// Every wait is a read with a deadline (WaitUntil polls with a short,
// bounded sleep); no sleep stands in for synchronisation.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <fmt/format.h>
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
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

// The relay-death test's listeners (--print-each) and their receivers.
struct Receivers {
  std::vector<LongWorker*> workers;
  std::string to;  // "G,G,..."

  explicit Receivers(std::vector<LongWorker*> all) : workers(std::move(all)) {
    for (LongWorker* worker : workers) {
      for (Gid gid : worker->gids()) to += (to.empty() ? "" : ",") + gid.ToString();
    }
  }
  // Every receiver of `worker` printed that it got message `index`.
  static bool Got(const LongWorker& worker, uint32_t index, std::chrono::seconds timeout) {
    for (Gid gid : worker.gids()) {
      const std::map<std::string, std::string> match{{"thread", gid.ToString()},
                                                     {"index", std::to_string(index)}};
      if (!worker.WaitFor("got", match, timeout)) return false;
    }
    return true;
  }
  bool GotAll(uint32_t index) const {
    for (const LongWorker* worker : workers) {
      if (!Got(*worker, index, seconds(60))) return false;
    }
    return true;
  }
};

// The sender's `event` lines about message `index` (or every one), by receiver.
std::map<std::string, WorkerEvent> ByReceiver(const std::string& output, const std::string& event,
                                              std::optional<uint32_t> index) {
  std::map<std::string, WorkerEvent> by;
  for (WorkerEvent& line : ParseWorkerEvents(output, event)) {
    if (index && line.Number("index") != *index) continue;
    INFO(output);
    CHECK(by.emplace(line.Field("receiver"), std::move(line)).second);
  }
  return by;
}

// Reviews 1 and 3 (item 8): a relay that dies AFTER it passed the request
// on to its subtree. Host 1's group (relay_local) is the relay process P1
// (the lowest receiver there: started first) and P2; with receivers on
// hosts 1, 2 and 3 the sender sends to P1 (subtree: hosts 1 and 2) and to
// host 3's relay; P1 passes it on to host 2's, then carries it to its own
// receivers and then to P2's. P2 is stopped, so P1's long send to it
// cannot complete (its partial_timeout is long): the window. P1 is killed
// in it, once its own receivers and those of hosts 2 and 3 have it, and
// once the sender has heard host 2's relay answer (a probe through that
// relay answered after it, on the same connection: the relay serves one
// request after the other). Without that answer the sender would take the
// whole subtree over: host 2's receivers would get a second copy (dropped)
// and be reported carried by the sender.
TEST_CASE(
    "netns multicast: a relay killed after passing a long message on: its subtree delivers, its "
    "other processes' receivers get it from the sender, each living one once and in order",
    "[netns][multicast]") {
  TOCL_SKIP_WITHOUT_NETNS();
  auto cluster = MustCreate();
  const std::string each = "--print-each";
  LongWorker relay =
      MustStart(*cluster, 1, {"listen", "--threads", "2", each, "--partial-timeout-ms", "120000"});
  LongWorker stopped = MustStart(*cluster, 1, {"listen", "--threads", "1", each});
  LongWorker below = MustStart(*cluster, 2, {"listen", "--threads", "2", each});
  LongWorker beside = MustStart(*cluster, 3, {"listen", "--threads", "1", each});
  REQUIRE(relay.gids().back() < stopped.gids().front());  // P1 is host 1's relay
  const Receivers receivers({&relay, &stopped, &below, &beside});
  LongWorker sender = MustStart(*cluster, 1,
                                {"send", "--mode", "relay-death", "--to", receivers.to, "--size",
                                 std::to_string(size_t{1} << 20), "--relay-local", "--timeout-ms",
                                 "120000", "--probe", below.gids().front().ToString()});
  auto go = [&] { REQUIRE(::kill(sender.pid(), SIGUSR1) == 0); };
  const Gid from = sender.gids().front().process();

  // Messages 0 (a Send) and 1 (a Multicast: every connection made).
  REQUIRE(sender.WaitFor("waiting", {}, seconds(60)));
  REQUIRE(receivers.GotAll(1));
  REQUIRE(::kill(stopped.pid(), SIGSTOP) == 0);
  REQUIRE(WaitUntil([&] { return Stopped(stopped.pid()); }, seconds(10)));
  go();  // message 2, the Multicast P1 dies in
  // P1 passed it on (before carrying it to its own receivers) and is on
  // P2's copy now; hosts 2 and 3 have theirs.
  REQUIRE(Receivers::Got(relay, 2, seconds(60)));
  REQUIRE(Receivers::Got(below, 2, seconds(60)));
  REQUIRE(Receivers::Got(beside, 2, seconds(60)));
  go();  // the probe
  REQUIRE(sender.WaitFor("probed", {{"delivered", "1"}}, seconds(60)));
  {
    INFO(sender.Output());
    REQUIRE(ByReceiver(sender.Output(), "carried", 2).empty());  // P1 has not answered
  }
  REQUIRE(::kill(relay.pid(), SIGKILL) == 0);
  auto killed = relay.Wait(seconds(30));
  REQUIRE(killed.ok());
  CHECK(*killed == 128 + SIGKILL);
  REQUIRE(::kill(stopped.pid(), SIGCONT) == 0);

  const std::string output = MustFinish(sender);
  INFO(output);
  CHECK(ParseWorkerEvents(output, "error").empty());
  const auto warm = ByReceiver(output, "carried", 1);
  const auto carried = ByReceiver(output, "carried", 2);
  const auto after = ByReceiver(output, "send", 3);
  const auto ends = ByReceiver(output, "end", std::nullopt);
  for (const LongWorker* worker : receivers.workers) {
    const bool dead = worker == &relay;
    // The relays of their groups carried message 1: P1 for host 1's.
    const Gid relay_of_group =
        worker == &stopped ? relay.gids().front().process() : worker->gids().front().process();
    for (Gid gid : worker->gids()) {
      const std::string g = gid.ToString();
      INFO(g);
      REQUIRE(warm.contains(g));
      CHECK(warm.at(g).Field("status") == "ok");
      CHECK(warm.at(g).Field("carrier") == relay_of_group.ToString());
      REQUIRE(carried.contains(g));
      // P1's receivers died with it; P2's got it from the sender, the
      // others from their relays (host 2's: under the dead one).
      CHECK((carried.at(g).Field("status") == "ok") == !dead);
      if (!dead) {
        CHECK(carried.at(g).Field("carrier") ==
              (worker == &stopped ? from : gid.process()).ToString());
      }
      REQUIRE(after.contains(g));
      CHECK((after.at(g).Field("status") == "ok") == !dead);
      REQUIRE(ends.contains(g));
      CHECK((ends.at(g).Field("status") == "ok") == !dead);
    }
  }
  // Every living receiver got 0, 1, 2 and 3, once each and in that order
  // (the listener checks the order too), the probe besides.
  for (LongWorker* worker : {&stopped, &below, &beside}) {
    const std::string listened = MustFinish(*worker);
    INFO(listened);
    CHECK(ParseWorkerEvents(listened, "error").empty());
    for (Gid gid : worker->gids()) {
      std::vector<uint64_t> indices;
      for (const WorkerEvent& got : ParseWorkerEvents(listened, "got")) {
        if (got.Field("thread") == gid.ToString()) indices.push_back(got.Number("index"));
      }
      CHECK(indices == std::vector<uint64_t>{0, 1, 2, 3});
    }
    const auto received = ParseWorkerEvents(listened, "received");
    CHECK(received.size() == worker->gids().size());
    for (const WorkerEvent& event : received) CHECK(event.Number("count") == 4);
  }
  CHECK(ParseWorkerEvents(below.Output(), "probe").size() == 1);
}

}  // namespace
}  // namespace tocl::testing
