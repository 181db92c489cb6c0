// The netns cluster harness: daemons answer over their own networks, every
// network joins the hosts, links go down and up, rate limits are applied,
// and nothing is left behind.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include "netns_cluster.h"

#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "catch_failure_listener.h"
#include "netns_skip.h"
#include "tocl/directory_client.h"
#include "tocl/gid.h"

// Status assertions (as tests/integration/status_assertions.h, which this
// binary does not link).
#define NETNS_REQUIRE_OK(expr)                      \
  do {                                              \
    const ::tocl::Status netns_status_ = (expr);    \
    INFO(#expr " -> " << netns_status_.ToString()); \
    REQUIRE(netns_status_.ok());                    \
  } while (false)

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const std::string kProbe = TOCL_NETNS_PROBE_PATH;
constexpr int kProbePort = 5077;

std::unique_ptr<NetnsCluster> MustCreate(NetnsClusterOptions options = {}) {
  auto cluster = NetnsCluster::Create(std::move(options));
  INFO("NetnsCluster::Create -> " << cluster.status().ToString());
  REQUIRE(cluster.ok());
  return std::move(cluster).value();
}

std::string Endpoint(const NetnsCluster& cluster, int host, int network) {
  return cluster.Address(host, network) + ":" + std::to_string(kProbePort);
}

// A probe listening on every network of `host`, ready when it returns.
std::vector<ChildProcess> ListenEverywhere(NetnsCluster& cluster, int host) {
  std::vector<ChildProcess> listeners;
  for (int m = 0; m < cluster.networks(); ++m) {
    auto child = cluster.Spawn(host, {kProbe, "listen", Endpoint(cluster, host, m)});
    REQUIRE(child.ok());
    listeners.push_back(std::move(child).value());
  }
  for (ChildProcess& listener : listeners) {
    bool ready = WaitUntil(
        [&] {
          return listener.Output().find("listening") != std::string::npos || listener.Exited();
        },
        seconds(10));
    INFO("listener output: " << listener.Output());
    REQUIRE(ready);
    REQUIRE(listener.running());
  }
  return listeners;
}

Status Reach(NetnsCluster& cluster, int from, int to, int network) {
  return cluster
      .Exec(from, {kProbe, "connect", Endpoint(cluster, to, network), "1000"}, seconds(10))
      .status();
}

std::set<std::string> Namespaces() {
  std::set<std::string> names;
  auto ip = FindProgram("ip");
  if (!ip.ok()) return names;
  auto listed = RunProgram({*ip, "netns", "list"});
  if (!listed.ok()) return names;
  std::istringstream lines(listed->output);
  std::string line;
  while (std::getline(lines, line)) names.insert(line.substr(0, line.find(' ')));
  return names;
}

TEST_CASE("a netns cluster refuses bad options before it touches anything", "[netns]") {
  CHECK(NetnsCluster::Create({.hosts = 1}).status().code() == StatusCode::kInvalidArgument);
  CHECK(NetnsCluster::Create({.hosts = 9}).status().code() == StatusCode::kInvalidArgument);
  NetnsClusterOptions none;
  none.networks.clear();
  CHECK(NetnsCluster::Create(none).status().code() == StatusCode::kInvalidArgument);
  NetnsClusterOptions bad_rate;
  bad_rate.networks = {{"fast"}};
  Status status = NetnsCluster::Create(bad_rate).status();
  CHECK(status.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(status.message(), Catch::Contains("'fast'"));

  CHECK(ParseTcRate("500mbit").value_or(0) == 500'000'000);
  CHECK(ParseTcRate("1gbit").value_or(0) == 1'000'000'000);
  CHECK(ParseTcRate("64kbit").value_or(0) == 64'000);
  CHECK(ParseTcRate("1200bit").value_or(0) == 1200);
  for (const char* bad : {"", "mbit", "0mbit", "500", "500mb", "500 mbit", "-5mbit", "5Mbit"}) {
    INFO(bad);
    CHECK_FALSE(ParseTcRate(bad).ok());
  }
}

TEST_CASE("each host's daemon answers over its tcp listener with its own host id and networks",
          "[netns]") {
  TOCL_SKIP_WITHOUT_NETNS();
  auto cluster = MustCreate();
  REQUIRE(cluster->hosts() == 2);
  CHECK(cluster->DaemonAddress(2) == "10.77.1.2:7390");
  CHECK(cluster->Cidr(1, 1) == "10.77.2.1/24");
  CHECK(cluster->PeerDaemons() == "1=10.77.1.1:7390,2=10.77.1.2:7390");
  CHECK(cluster->DefaultNetworks(1) == "tcp:eth0,tcp:eth1,shm");

  // Over tcp, from the other host's namespace.
  for (auto [from, to] : {std::pair{1, 2}, std::pair{2, 1}}) {
    auto hosts = cluster->Exec(from, {kProbe, "hosts", cluster->DaemonAddress(to)});
    INFO("from host " << from << " to host " << to << ": " << hosts.status().ToString());
    REQUIRE(hosts.ok());
    // Every daemon lists every host of the cluster; its own row is complete
    // at once (the others' attributes arrive by replication).
    CHECK_THAT(*hosts, Catch::Contains("host h" + std::to_string(to) + " name=netns-h" +
                                       std::to_string(to) + " networks=tcp:eth0,tcp:eth1,shm\n"));
  }
  // Over the unix socket, from the test itself.
  for (int h = 1; h <= 2; ++h) {
    auto client = DirectoryClient::Connect(cluster->DaemonSocket(h));
    REQUIRE(client.ok());
    auto host = (*client)->Lookup(Gid::Host(static_cast<uint32_t>(h)));
    INFO(host.status().ToString());
    REQUIRE(host.ok());
    CHECK(host->attributes["networks"] == "tcp:eth0,tcp:eth1,shm");
  }
}

TEST_CASE("a process in host 1 reaches host 2 over each network and only its own devices",
          "[netns]") {
  TOCL_SKIP_WITHOUT_NETNS();
  auto cluster = MustCreate();
  auto listeners = ListenEverywhere(*cluster, 2);
  for (int m = 0; m < cluster->networks(); ++m) {
    INFO("network " << m);
    Status reached = Reach(*cluster, 1, 2, m);
    INFO(reached.ToString());
    CHECK(reached.ok());
  }
  // A host sees lo and its own eth0 and eth1, nothing of the machine's.
  auto ip = FindProgram("ip");
  REQUIRE(ip.ok());
  auto links = cluster->Exec(1, {*ip, "-o", "-4", "addr", "show"});
  REQUIRE(links.ok());
  INFO(*links);
  CHECK_THAT(*links, Catch::Contains("lo ") && Catch::Contains("eth0 ") &&
                         Catch::Contains("10.77.1.1/24") && Catch::Contains("10.77.2.1/24"));
  std::istringstream lines(*links);
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) ++count;
  CHECK(count == 3);
  // And the environment Spawn and Exec give.
  auto env = cluster->Exec(1, {"/usr/bin/env"}, seconds(10), {{"TOCL_NETWORKS", "tcp:eth1"}});
  REQUIRE(env.ok());
  CHECK_THAT(*env, !Catch::Contains("TOCL_PEER_DAEMONS=") &&
                       Catch::Contains("TOCL_DAEMON=" + cluster->DaemonSocket(1)) &&
                       Catch::Contains("TOCL_NETWORKS=tcp:eth1\n") &&
                       !Catch::Contains("TOCL_NETWORKS=tcp:eth0"));
}

TEST_CASE("a link set down makes its network unreachable and up restores it", "[netns]") {
  TOCL_SKIP_WITHOUT_NETNS();
  auto cluster = MustCreate();
  auto listeners = ListenEverywhere(*cluster, 2);
  REQUIRE(Reach(*cluster, 1, 2, 0).ok());

  NETNS_REQUIRE_OK(cluster->SetLink(1, 0, false));
  CHECK_FALSE(Reach(*cluster, 1, 2, 0).ok());
  CHECK(Reach(*cluster, 1, 2, 1).ok());  // the other network is untouched

  NETNS_REQUIRE_OK(cluster->SetLink(1, 0, true));
  CHECK(WaitUntil([&] { return Reach(*cluster, 1, 2, 0).ok(); }, seconds(10), milliseconds(50)));

  // The far end's link too.
  NETNS_REQUIRE_OK(cluster->SetLink(2, 1, false));
  CHECK_FALSE(Reach(*cluster, 1, 2, 1).ok());
  NETNS_REQUIRE_OK(cluster->SetLink(2, 1, true));
  CHECK(WaitUntil([&] { return Reach(*cluster, 1, 2, 1).ok(); }, seconds(10), milliseconds(50)));
}

TEST_CASE("a rate limit is a tbf qdisc on every host's device of that network", "[netns]") {
  TOCL_SKIP_WITHOUT_NETNS();
  NetnsClusterOptions options;
  options.networks = {{"500mbit"}, {""}};
  options.start_daemons = false;
  auto cluster = MustCreate(options);
  auto tc = FindProgram("tc");
  REQUIRE(tc.ok());
  auto Qdisc = [&](int host, int network) {
    auto shown = RunProgram({*tc, "-n", cluster->Namespace(host), "qdisc", "show", "dev",
                             cluster->Interface(host, network)});
    REQUIRE(shown.ok());
    return shown->output;
  };
  for (int h = 1; h <= 2; ++h) {
    INFO("host " << h);
    CHECK_THAT(Qdisc(h, 0), Catch::Contains("tbf") && Catch::Contains("rate 500Mbit"));
    CHECK_THAT(Qdisc(h, 1), !Catch::Contains("tbf"));
  }
  NETNS_REQUIRE_OK(cluster->Shape(1, {"200mbit"}));
  NETNS_REQUIRE_OK(cluster->Shape(0, {""}));
  for (int h = 1; h <= 2; ++h) {
    INFO("host " << h);
    CHECK_THAT(Qdisc(h, 0), !Catch::Contains("tbf"));
    CHECK_THAT(Qdisc(h, 1), Catch::Contains("tbf") && Catch::Contains("rate 200Mbit"));
  }
  CHECK(cluster->Link(1).rate == "200mbit");
  NETNS_REQUIRE_OK(cluster->Shape(0, {""}));  // nothing to remove: fine
  CHECK(cluster->Shape(0, {"lots"}).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("a cluster deletes its namespaces, and the next one those of dead runs", "[netns]") {
  TOCL_SKIP_WITHOUT_NETNS();
  auto ip = FindProgram("ip");
  REQUIRE(ip.ok());
  // A namespace named as a cluster of a process that no longer runs.
  auto gone = ChildProcess::Spawn({"/bin/true"});
  REQUIRE(gone.ok());
  REQUIRE(gone->Wait(seconds(10)).value_or(-1) == 0);
  const std::string stale = "tocl-nc" + std::to_string(gone->pid()) + "-0-h1";
  // (A cluster made by a test running in parallel may delete it at once.)
  REQUIRE(RunProgram({*ip, "netns", "add", stale}).value_or(ProgramResult{}).exit_code == 0);

  std::vector<std::string> ours;
  {
    auto cluster = MustCreate({.hosts = 3, .start_daemons = false});
    CHECK(Namespaces().count(stale) == 0);
    ours = {cluster->SwitchNamespace(), cluster->Namespace(1), cluster->Namespace(3)};
    for (const std::string& ns : ours) CHECK(Namespaces().count(ns) == 1);
    // A child still running in a namespace does not keep it.
    auto sleeper = cluster->Spawn(2, {"/bin/sleep", "60"});
    REQUIRE(sleeper.ok());
    ours.push_back(cluster->Namespace(2));
    cluster.reset();
    CHECK(sleeper->Wait(seconds(10)).value_or(-1) == 128 + SIGKILL);
  }
  for (const std::string& ns : ours) CHECK(Namespaces().count(ns) == 0);
}

}  // namespace
}  // namespace tocl::testing
