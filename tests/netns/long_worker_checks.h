// Catch2 checks shared by the tests that run tocl-long-worker on two hosts
// (long_messages_test.cc over two tcp networks, via_networks_test.cc over
// tcp and via): starting the cluster and the workers, their exit, what the
// sender's statistics and digests say, and the interleaved-threads check.
#pragma once

#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "netns_cluster.h"
#include "worker_lines.h"

namespace tocl::testing {

// REQUIRE(condition), showing what the workers have printed so far when it
// fails (INFO takes its text when it is reached).
#define REQUIRE_SHOWING(condition, sender, receiver)  \
  do {                                                \
    const bool netns_held_ = (condition);             \
    INFO(::tocl::testing::Outputs(sender, receiver)); \
    REQUIRE(netns_held_);                             \
  } while (false)

// A cluster whose daemons wait 60 s before they call a host down: these
// tests cut network 0, which also carries the heartbeats, and it is the
// data plane's failover that is under test, not host failure (cluster_test.cc
// tests that).
std::unique_ptr<NetnsCluster> MustCreateFailoverCluster(NetnsClusterOptions options = {});

// LongWorker::Start, required to succeed.
LongWorker MustStartWorker(NetnsCluster& cluster, int host, std::vector<std::string> args,
                           const std::string& ready_event, bool pipe_stdin = false,
                           const std::string& networks = LongWorker::kTwoTcpNetworks);

std::string Outputs(const LongWorker& sender, const LongWorker& receiver);

// Both workers exit 0 within `timeout` each, with no error line (their
// output shown otherwise). A sender started with --pause-before-exit is let
// go (`sender_paused`) once the receiver has ended, so that the receiver's
// final lines see the connections still up.
void RequireSuccess(LongWorker& sender, LongWorker& receiver, std::chrono::seconds timeout,
                    bool sender_paused = false);

// Sum of every network's bytes_sent so far, as the sender's progress lines
// say.
uint64_t BytesSent(const LongWorker& sender);

// A worker's final network lines: by device, its "network" line and its
// "peer" line for one peer process.
struct WorkerNetworks {
  std::map<std::string, WorkerEvent> network;  // by device
  std::map<std::string, WorkerEvent> peer;     // by device
};
WorkerNetworks Networks(const LongWorker& worker, Gid peer_process);

// sha256 of each message sent, by "thread/seq".
std::map<std::string, std::string> SentDigests(const LongWorker& sender);

// Each of the sender's `threads` threads sent `messages` (the "mix" plan) to
// the receiver's thread of the same index: every one arrived once, in
// order, from the right thread, with the SHA-256 it was sent with, and both
// long and short messages were among them.
void CheckInterleavedArrival(const LongWorker& sender, const LongWorker& receiver, int threads,
                             uint64_t messages);

}  // namespace tocl::testing
