#include "long_worker_checks.h"

#include <set>

namespace tocl::testing {

std::unique_ptr<NetnsCluster> MustCreateFailoverCluster(NetnsClusterOptions options) {
  options.daemon_args = {"--down-after", "60"};
  auto cluster = NetnsCluster::Create(std::move(options));
  INFO("NetnsCluster::Create -> " << cluster.status().ToString());
  REQUIRE(cluster.ok());
  return std::move(cluster).value();
}

LongWorker MustStartWorker(NetnsCluster& cluster, int host, std::vector<std::string> args,
                           const std::string& ready_event, bool pipe_stdin,
                           const std::string& networks) {
  auto worker = LongWorker::Start(cluster, host, std::move(args), ready_event, pipe_stdin,
                                  std::chrono::seconds(30), networks);
  INFO(worker.status().ToString());
  REQUIRE(worker.ok());
  return std::move(worker).value();
}

std::string Outputs(const LongWorker& sender, const LongWorker& receiver) {
  return "sender:\n" + sender.Output() + "\nreceiver:\n" + receiver.Output();
}

void RequireSuccess(LongWorker& sender, LongWorker& receiver, std::chrono::seconds timeout,
                    bool sender_paused) {
  auto received = receiver.Wait(timeout);
  if (sender_paused) sender.Go();
  auto sent = sender.Wait(timeout);
  INFO(Outputs(sender, receiver));
  CHECK(sender.Events("error").empty());
  CHECK(receiver.Events("error").empty());
  REQUIRE(sent.ok());
  REQUIRE(received.ok());
  CHECK(*sent == 0);
  REQUIRE(*received == 0);
}

uint64_t BytesSent(const LongWorker& sender) {
  auto progress = sender.Events("progress");
  return progress.empty() ? 0 : progress.back().Number("bytes");
}

WorkerNetworks Networks(const LongWorker& worker, Gid peer_process) {
  WorkerNetworks result;
  std::map<std::string, std::string> device_of;
  for (const WorkerEvent& network : worker.Events("network")) {
    device_of[network.Field("name")] = network.Field("device");
    result.network[network.Field("device")] = network;
  }
  for (const WorkerEvent& peer : worker.Events("peer")) {
    if (peer.Field("gid") == peer_process.ToString()) {
      result.peer[device_of[peer.Field("network")]] = peer;
    }
  }
  return result;
}

std::map<std::string, std::string> SentDigests(const LongWorker& sender) {
  std::map<std::string, std::string> digests;
  for (const WorkerEvent& sent : sender.Events("sent")) {
    digests[sent.Field("thread") + "/" + sent.Field("seq")] = sent.Field("sha256");
  }
  return digests;
}

void CheckInterleavedArrival(const LongWorker& sender, const LongWorker& receiver, int threads,
                             uint64_t messages) {
  INFO(Outputs(sender, receiver));
  REQUIRE(sender.gids().size() == static_cast<size_t>(threads));
  const auto digests = SentDigests(sender);
  CHECK(digests.size() == threads * messages);
  std::set<bool> long_and_short;
  for (int t = 0; t < threads; ++t) {
    INFO("thread " << t);
    const std::string thread = std::to_string(t);
    auto finished = receiver.WaitFor("finished", {{"thread", thread}}, std::chrono::seconds(0));
    REQUIRE(finished.has_value());
    CHECK(finished->Field("from") == sender.gids()[t].ToString());
    CHECK(finished->Number("count") == messages);
    uint64_t next = 0;
    for (const WorkerEvent& got : receiver.Events("got")) {
      if (got.Field("thread") != thread) continue;
      CHECK(got.Field("from") == sender.gids()[t].ToString());
      CHECK(got.Number("seq") == next);
      auto digest = digests.find(thread + "/" + got.Field("seq"));
      REQUIRE(digest != digests.end());
      CHECK(got.Field("sha256") == digest->second);
      long_and_short.insert(got.Number("bytes") > (64 << 10));
      ++next;
    }
    CHECK(next == messages);
  }
  CHECK(long_and_short.size() == 2);
}

}  // namespace tocl::testing
