// A cluster of daemons on three hosts (issue #5 §5): each host a network
// namespace with its own toclsd (host 1 the seed, the others joined), real
// tocl processes in the namespaces (tocl-cluster-worker, tocl-enroll-worker)
// and the test reading every daemon's directory through its unix socket.
//
// Joining and stable host ids; thousands of entities replicated with equal
// query results on every host; a daemon killed and restarted catches up; a
// host cut off is marked down within the configured time and comes back;
// a process spawned on another host talks with its spawner; threads spawned
// in a running remote process; exit notifications for thread, process and
// host; a membership watch of another host's process (unreachable, back,
// left); bad spawn requests fail clearly.
//
// Every wait is a poll or a read with a deadline; nothing sleeps.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "catch_failure_listener.h"
#include "netns_cluster.h"
#include "netns_skip.h"
#include "tocl/directory_client.h"
#include "worker_lines.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

const std::string kWorker = TOCL_CLUSTER_WORKER_PATH;
const std::string kEnrollWorker = TOCL_ENROLL_WORKER_PATH;
const std::string kCli = TOCL_CLI_PATH;

// Heartbeats fast enough that "down" is seen in about a second.
const std::vector<std::string> kFastFailureDetection = {"--heartbeat-interval", "0.2",
                                                        "--down-after", "1"};

std::unique_ptr<NetnsCluster> MustCreate(
    int hosts, std::vector<std::string> daemon_args = kFastFailureDetection) {
  NetnsClusterOptions options;
  options.hosts = hosts;
  options.networks = std::vector<NetnsLinkSpec>(1);
  options.daemon_args = std::move(daemon_args);
  auto cluster = NetnsCluster::Create(std::move(options));
  INFO("NetnsCluster::Create -> " << cluster.status().ToString());
  REQUIRE(cluster.ok());
  return std::move(cluster).value();
}

// A child that runs until the test closes its stdin.
SpawnOptions HoldingStdin() {
  SpawnOptions options;
  options.pipe_stdin = true;
  return options;
}

std::unique_ptr<DirectoryClient> MustConnect(NetnsCluster& cluster, int host) {
  auto client = DirectoryClient::Connect(cluster.DaemonSocket(host));
  INFO("connect to host " << host << ": " << client.status().ToString());
  REQUIRE(client.ok());
  return std::move(client).value();
}

LongWorker MustStart(NetnsCluster& cluster, int host, std::vector<std::string> args,
                     const std::string& ready = "ready") {
  auto worker = LongWorker::StartProgram(cluster, host, kWorker, std::move(args), ready);
  INFO(worker.status().ToString());
  REQUIRE(worker.ok());
  return std::move(worker).value();
}

// The worker's run to its end: its output; fails the test when it fails.
std::string MustFinish(LongWorker& worker, seconds timeout = seconds(60)) {
  auto code = worker.Wait(timeout);
  INFO(worker.Output());
  REQUIRE(code.ok());
  REQUIRE(*code == 0);
  return worker.Output();
}

// "gid1 state1,gid2 state2,...": what a query shows, to compare hosts.
std::string QueryText(DirectoryClient& client, const std::string& expression) {
  auto all = client.QueryAll(expression);
  if (!all.ok()) return "error: " + all.status().ToString();
  std::string text;
  for (const Entity& entity : *all) {
    text += fmt::format("{} {},", entity.gid.ToString(), EntityStateName(entity.state));
  }
  return text;
}

EntityState StateOn(DirectoryClient& client, Gid gid) {
  auto entity = client.Lookup(gid);
  return entity.ok() ? entity->state : EntityState::kExited;
}

TEST_CASE("netns cluster: three daemons join with stable ids and replicate thousands of entities",
          "[netns][cluster]") {
  TOCL_SKIP_WITHOUT_NETNS();
  auto cluster = MustCreate(3);
  std::vector<std::unique_ptr<DirectoryClient>> clients;
  for (int h = 1; h <= 3; ++h) clients.push_back(MustConnect(*cluster, h));

  // Every daemon knows every host, with its address, from its own replica.
  for (int h = 1; h <= 3; ++h) {
    for (int other = 1; other <= 3; ++other) {
      Entity host;
      REQUIRE(WaitUntil(
          [&] {
            auto entity = clients[h - 1]->Lookup(Gid::Host(other));
            if (!entity.ok() || entity->state != EntityState::kRunning) return false;
            host = *entity;
            return true;
          },
          seconds(10)));
      CHECK(host.address == cluster->DaemonAddress(other));
    }
  }

  // 1,500 threads on each host, registered there.
  std::vector<ChildProcess> enrollers;
  for (int h = 1; h <= 3; ++h) {
    auto process =
        cluster->Spawn(h,
                       {kEnrollWorker, "--daemon", cluster->DaemonSocket(h), "--threads", "1500",
                        "--batch", "500", "--name", fmt::format("filler-{}", h), "--hold"},
                       {}, HoldingStdin());
    REQUIRE(process.ok());
    enrollers.push_back(std::move(*process));
  }
  for (ChildProcess& process : enrollers) {
    REQUIRE(WaitUntil([&] { return process.Output().find("holding") != std::string::npos; },
                      seconds(60)));
  }
  const std::string expression = "kind=thread and state=running";
  std::string on_first;
  REQUIRE(WaitUntil(
      [&] {
        on_first = QueryText(*clients[0], expression);
        return QueryText(*clients[1], expression) == on_first &&
               QueryText(*clients[2], expression) == on_first;
      },
      seconds(30)));
  CHECK(std::count(on_first.begin(), on_first.end(), ',') == 4500);
  // Attribute queries and host ranges answer the same everywhere too.
  for (int h = 1; h <= 3; ++h) {
    auto filler = clients[0]->QueryAll(fmt::format("kind=process and name=filler-{}", h));
    REQUIRE(filler.ok());
    REQUIRE(filler->size() == 1);
    CHECK(filler->front().gid.host() == Gid::Host(h));
    CHECK(QueryText(*clients[h - 1], fmt::format("kind=thread and host=h{}", 1 + h % 3)) ==
          QueryText(*clients[0], fmt::format("kind=thread and host=h{}", 1 + h % 3)));
  }

  // A joiner restarts: same host id; its processes are still its own.
  for (ChildProcess& process : enrollers) process.CloseStdin();
  for (ChildProcess& process : enrollers) REQUIRE(process.Wait(seconds(30)).ok());
  REQUIRE(cluster->HostDaemon(2).Stop().value_or(-1) == 0);
  REQUIRE(cluster->HostDaemon(2).Start().ok());
  auto again = MustConnect(*cluster, 2);
  auto self = again->Lookup(Gid::Host(2));
  REQUIRE(self.ok());
  CHECK(self->name == "netns-h2");
  CHECK(QueryText(*again, "kind=process and name=filler-2").find("h2.p") == 0);
}

TEST_CASE("netns cluster: a daemon killed with SIGKILL and restarted catches up",
          "[netns][cluster]") {
  TOCL_SKIP_WITHOUT_NETNS();
  auto cluster = MustCreate(3);
  REQUIRE(cluster->HostDaemon(3).Kill().ok());
  // Registrations on host 1 while host 3's daemon is gone.
  auto filler = cluster->Exec(1,
                              {kEnrollWorker, "--daemon", cluster->DaemonSocket(1), "--threads",
                               "2000", "--batch", "500", "--name", "while-away"},
                              seconds(60));
  INFO(filler.status().ToString());
  REQUIRE(filler.ok());
  REQUIRE(cluster->HostDaemon(3).Start().ok());
  auto first = MustConnect(*cluster, 1);
  auto third = MustConnect(*cluster, 3);
  const std::string expression = "kind=thread and host=h1";
  const std::string expected = QueryText(*first, expression);
  REQUIRE(std::count(expected.begin(), expected.end(), ',') == 2000);
  CHECK(WaitUntil([&] { return QueryText(*third, expression) == expected; }, seconds(30)));
}

TEST_CASE("netns cluster: a host cut off is marked down in time, sends to it fail, it comes back",
          "[netns][cluster]") {
  TOCL_SKIP_WITHOUT_NETNS();
  auto cluster = MustCreate(3);
  auto first = MustConnect(*cluster, 1);
  LongWorker remote = MustStart(*cluster, 3, {"serve"});
  const Gid remote_thread = remote.gids().at(0);
  REQUIRE(WaitUntil([&] { return StateOn(*first, remote_thread) == EntityState::kRunning; },
                    seconds(10)));
  // A watcher on host 1 of host 3, by tag, and of its process, by callback.
  LongWorker host_watch = MustStart(*cluster, 1, {"notify", "--target", "h3"}, "watching");
  LongWorker process_watch = MustStart(
      *cluster, 1, {"notify", "--callback", "--target", remote_thread.process().ToString()},
      "watching");

  const auto cut = Clock::now();
  REQUIRE(cluster->SetLink(3, 0, false).ok());
  REQUIRE(WaitUntil([&] { return StateOn(*first, Gid::Host(3)) == EntityState::kUnreachable; },
                    seconds(10)));
  const double seen_after = std::chrono::duration<double>(Clock::now() - cut).count();
  INFO("host 3 seen down after " << seen_after << " s (down-after 1 s, heartbeat 0.2 s)");
  CHECK(seen_after < 2.5);
  CHECK(StateOn(*first, remote_thread) == EntityState::kUnreachable);
  CHECK(StateOn(*first, remote_thread.process()) == EntityState::kUnreachable);

  auto host_notice = host_watch.WaitFor("notice", {{"gid", "h3"}}, seconds(10));
  REQUIRE(host_notice);
  CHECK(host_notice->Field("what") == "unreachable");
  auto process_notice = process_watch.WaitFor("notice", {}, seconds(10));
  REQUIRE(process_notice);
  CHECK(process_notice->Field("what") == "unreachable");
  CHECK(process_notice->Field("gid") == remote_thread.process().ToString());

  // A send from host 1 to the cut-off host fails at once, and says why.
  auto sent = cluster->Exec(1, {kWorker, "send", "--to", remote_thread.ToString()}, seconds(20));
  REQUIRE_FALSE(sent.ok());
  CHECK_THAT(sent.status().message(),
             Catch::Contains("status unavailable") && Catch::Contains("down"));

  // Back: reachable again, and what changed on host 3 meanwhile arrives.
  REQUIRE(cluster->SetLink(3, 0, true).ok());
  REQUIRE(WaitUntil([&] { return StateOn(*first, Gid::Host(3)) == EntityState::kRunning; },
                    seconds(10)));
  CHECK(StateOn(*first, remote_thread) == EntityState::kRunning);
  auto later = cluster->Exec(3,
                             {kEnrollWorker, "--daemon", cluster->DaemonSocket(3), "--threads",
                              "10", "--name", "after-the-cut"},
                             seconds(30));
  REQUIRE(later.ok());
  CHECK(WaitUntil(
      [&] {
        auto found = first->QueryAll("kind=process and name=after-the-cut");
        return found.ok() && found->size() == 1;
      },
      seconds(10)));
  // One notice each, not two.
  CHECK(host_watch.WaitFor("notices", {{"count", "1"}}, seconds(10)));
  CHECK(process_watch.WaitFor("notices", {{"count", "1"}}, seconds(10)));
}

TEST_CASE(
    "netns cluster: a membership watch sees another host's process go unreachable, come "
    "back and leave",
    "[netns][cluster][membership]") {
  TOCL_SKIP_WITHOUT_NETNS();
  auto cluster = MustCreate(2);
  LongWorker remote = MustStart(*cluster, 2, {"serve"});
  const Gid process = remote.gids().at(0).process();
  // The watch starts once host 1's replica of host 2 holds the process, so that it is in the
  // initial set ("joined" before "current"), not a change that replicates after it.
  auto first = MustConnect(*cluster, 1);
  REQUIRE(WaitUntil([&] { return first->Lookup(process).ok(); }, seconds(10)));
  // On host 1, from its replica of host 2.
  LongWorker watcher =
      MustStart(*cluster, 1,
                {"members", "--query", "kind=process and process=" + process.ToString()}, "member");
  auto member = [&](const std::string& change) {
    return watcher.WaitFor("member", {{"change", change}, {"gid", process.ToString()}},
                           seconds(20));
  };
  REQUIRE(member("joined"));
  REQUIRE(watcher.WaitFor("member", {{"change", "current"}}, seconds(20)));

  REQUIRE(cluster->SetLink(2, 0, false).ok());
  auto unreachable = member("unreachable");
  CHECK(unreachable);
  if (unreachable) CHECK(unreachable->Field("state") == "unreachable");
  REQUIRE(cluster->SetLink(2, 0, true).ok());
  auto reachable = member("reachable");
  CHECK(reachable);
  if (reachable) CHECK(reachable->Field("state") == "running");

  // Killed: it leaves, once the exit has replicated to host 1.
  REQUIRE(::kill(remote.pid(), SIGKILL) == 0);
  auto left = member("left");
  CHECK(left);
  if (left) CHECK(left->Field("state") == "exited");
  INFO(watcher.Output());
  // Each once, in that order.
  std::vector<std::string> changes;
  for (const WorkerEvent& event : watcher.Events("member")) {
    changes.push_back(event.Field("change"));
  }
  CHECK(changes ==
        std::vector<std::string>{"joined", "current", "unreachable", "reachable", "left"});
}

TEST_CASE("netns cluster: a process spawned on another host talks with its spawner",
          "[netns][cluster][spawn]") {
  TOCL_SKIP_WITHOUT_NETNS();
  auto cluster = MustCreate(3);
  LongWorker spawner =
      MustStart(*cluster, 1, {"spawn-process", "--host", "2", "--program", kWorker, "--count", "3"},
                "started");
  const std::string output = MustFinish(spawner);
  const auto spawned = ParseWorkerEvents(output, "spawned");
  REQUIRE(spawned.size() == 3);
  for (const WorkerEvent& event : spawned) {
    auto gid = Gid::Parse(event.Field("gid"));
    REQUIRE(gid.ok());
    CHECK(gid->host() == Gid::Host(2));
  }
  const auto notices = ParseWorkerEvents(output, "notice");
  REQUIRE(notices.size() == 3);
  for (const WorkerEvent& notice : notices) {
    CHECK(notice.Field("what") == "exited");
    CHECK(notice.Field("exit") == "7");
  }
  // The daemon of host 2 recorded it, and every host's replica shows it.
  auto third = MustConnect(*cluster, 3);
  const Gid child = *Gid::Parse(spawned.front().Field("gid"));
  Entity entity;
  REQUIRE(WaitUntil(
      [&] {
        auto found = third->Lookup(child);
        if (!found.ok() || found->state != EntityState::kExited) return false;
        entity = *found;
        return true;
      },
      seconds(10)));
  CHECK(entity.exit_status == std::optional<int>(7));
  CHECK(entity.parent.host() == Gid::Host(1));
  // Its stdout, read from another host.
  auto log = third->ReadLog(child, LogStream::kStdout);
  REQUIRE(log.ok());
  CHECK_THAT(log->data, Catch::Contains("exiting code 7"));
  CHECK(log->process_exited);
}

TEST_CASE("netns cluster: the tocl command spawns, kills, waits for and shows logs across hosts",
          "[netns][cluster][spawn]") {
  TOCL_SKIP_WITHOUT_NETNS();
  auto cluster = MustCreate(2);
  auto spawned =
      cluster->Exec(1, {kCli, "spawn", "--json", "--host", "h2", "--", kWorker, "serve"});
  INFO(spawned.status().ToString());
  REQUIRE(spawned.ok());
  const size_t at = spawned->find("\"gid\":\"");
  REQUIRE(at != std::string::npos);
  const std::string gid = spawned->substr(at + 7, spawned->find('"', at + 7) - at - 7);
  CHECK(gid.starts_with("h2.p"));
  LongWorker waiter = MustStart(*cluster, 1, {"notify", "--target", gid}, "watching");
  auto killed = cluster->Exec(1, {kCli, "kill", "--signal", "KILL", gid});
  INFO(killed.status().ToString());
  REQUIRE(killed.ok());
  auto waited = cluster->Exec(1, {kCli, "wait", "--timeout", "20", gid});
  INFO(waited.status().ToString());
  REQUIRE(waited.ok());
  CHECK_THAT(*waited, Catch::Contains("killed by signal 9"));
  auto notice = waiter.WaitFor("notice", {{"gid", gid}}, seconds(10));
  REQUIRE(notice);
  CHECK(notice->Field("signal") == "9");
  auto logs = cluster->Exec(1, {kCli, "logs", gid});
  INFO(logs.status().ToString());
  REQUIRE(logs.ok());
  CHECK_THAT(*logs, Catch::Contains("ready"));
}

TEST_CASE("netns cluster: threads spawned in a running remote process, and their exit notices",
          "[netns][cluster][spawn]") {
  TOCL_SKIP_WITHOUT_NETNS();
  auto cluster = MustCreate(2);
  LongWorker target = MustStart(*cluster, 2, {"serve"});
  const std::string process = target.gids().at(0).process().ToString();
  // Host 1 learns of the process through replication (milliseconds).
  auto first = MustConnect(*cluster, 1);
  REQUIRE(
      WaitUntil([&] { return first->Lookup(target.gids().at(0).process()).ok(); }, seconds(10)));

  LongWorker spawner =
      MustStart(*cluster, 1, {"spawn-thread", "--process", process, "--count", "20"}, "started");
  const std::string output = MustFinish(spawner);
  const auto threads = ParseWorkerEvents(output, "thread");
  REQUIRE(threads.size() == 20);
  std::set<std::string> distinct;
  for (const WorkerEvent& thread : threads) {
    CHECK(thread.Field("gid").starts_with(process + ".t"));
    distinct.insert(thread.Field("gid"));
  }
  CHECK(distinct.size() == 20);

  // A parked thread: watched from host 1, it exits when it gets a message.
  LongWorker parker =
      MustStart(*cluster, 1, {"spawn-thread", "--process", process, "--entry", "park"}, "started");
  MustFinish(parker);
  const auto parked = ParseWorkerEvents(parker.Output(), "thread");
  REQUIRE(parked.size() == 1);
  const std::string parked_gid = parked.front().Field("gid");
  LongWorker watcher = MustStart(*cluster, 1, {"notify", "--target", parked_gid}, "watching");
  auto sent = cluster->Exec(1, {kWorker, "send", "--to", parked_gid}, seconds(20));
  REQUIRE(sent.ok());
  auto notice = watcher.WaitFor("notice", {{"gid", parked_gid}}, seconds(20));
  REQUIRE(notice);
  CHECK(notice->Field("what") == "exited");
  CHECK(watcher.WaitFor("notices", {{"count", "1"}}, seconds(10)));

  // An unknown entry is a clear error.
  auto unknown = cluster->Exec(
      1, {kWorker, "spawn-thread", "--process", process, "--entry", "nope"}, seconds(20));
  REQUIRE_FALSE(unknown.ok());
  CHECK_THAT(unknown.status().message(),
             Catch::Contains("status not found") && Catch::Contains("nope"));
}

TEST_CASE("netns cluster: without the seed, lookups, queries, messaging and spawn go on",
          "[netns][cluster][spawn]") {
  TOCL_SKIP_WITHOUT_NETNS();
  auto cluster = MustCreate(3);
  REQUIRE(cluster->HostDaemon(1).Kill().ok());  // the seed
  auto second = MustConnect(*cluster, 2);
  // Host 2 spawns on host 3; the child says hello to its spawner on host 2
  // and answers an echo (spawn-process does all of it).
  LongWorker spawner =
      MustStart(*cluster, 2, {"spawn-process", "--host", "3", "--program", kWorker}, "started");
  const std::string output = MustFinish(spawner);
  const auto spawned = ParseWorkerEvents(output, "spawned");
  REQUIRE(spawned.size() == 1);
  const Gid child = *Gid::Parse(spawned.front().Field("gid"));
  CHECK(child.host() == Gid::Host(3));
  CHECK(ParseWorkerEvents(output, "echo").size() == 1);
  // Host 2's replica has host 3's rows; queries span the hosts still up.
  CHECK(WaitUntil([&] { return StateOn(*second, child) == EntityState::kExited; }, seconds(10)));
  auto processes = second->QueryAll("kind=process and host=h3");
  REQUIRE(processes.ok());
  CHECK_FALSE(processes->empty());
  // The seed is seen down by the others, and comes back.
  CHECK(WaitUntil([&] { return StateOn(*second, Gid::Host(1)) == EntityState::kUnreachable; },
                  seconds(10)));
  REQUIRE(cluster->HostDaemon(1).Start().ok());
  CHECK(WaitUntil([&] { return StateOn(*second, Gid::Host(1)) == EntityState::kRunning; },
                  seconds(15)));
}

TEST_CASE("netns cluster: bad spawn requests fail clearly", "[netns][cluster][spawn]") {
  TOCL_SKIP_WITHOUT_NETNS();
  auto cluster = MustCreate(2);
  auto client = MustConnect(*cluster, 1);

  ::tocl::SpawnOptions missing;
  missing.executable = "/no/such/program";
  missing.host = Gid::Host(2);
  auto result = client->SpawnProcess(missing);
  REQUIRE_FALSE(result.ok());
  CHECK(result.status().code() == StatusCode::kNotFound);
  CHECK_THAT(result.status().message(), Catch::Contains("/no/such/program"));

  ::tocl::SpawnOptions unknown_host;
  unknown_host.executable = kWorker;
  unknown_host.args = {"serve"};
  unknown_host.host = Gid::Host(9);
  result = client->SpawnProcess(unknown_host);
  REQUIRE_FALSE(result.ok());
  CHECK(result.status().code() == StatusCode::kNotFound);
  CHECK_THAT(result.status().message(), Catch::Contains("h9"));

  ::tocl::SpawnOptions nowhere;
  nowhere.executable = kWorker;
  nowhere.where = "gpu=1";
  result = client->SpawnProcess(nowhere);
  REQUIRE_FALSE(result.ok());
  CHECK_THAT(result.status().message(), Catch::Contains("gpu=1"));

  // Placement by query picks the least loaded of the hosts named.
  ::tocl::SpawnOptions placed;
  placed.executable = kWorker;
  placed.args = {"serve"};
  placed.where = "host=h2";
  auto child = client->SpawnProcess(placed);
  INFO(child.status().ToString());
  REQUIRE(child.ok());
  CHECK(child->gid.host() == Gid::Host(2));
  CHECK(client->Kill(child->gid, SIGKILL).ok());
}

}  // namespace
}  // namespace tocl::testing
