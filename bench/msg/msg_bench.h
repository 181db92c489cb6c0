// `tocl-bench msg`: messaging latency, bandwidth and rate of tocl between
// threads of two processes, each figure a ratio to a raw baseline measured
// between the same two processes in the same run (bench/README.md).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "report.h"
#include "tocl/status.h"

namespace tocl::bench {

struct MsgBenchOptions {
  // Case groups to run: latency, blocking, bandwidth, long, rate, rate64,
  // threads, idle, requests, handlers, packed (long, rate64, requests,
  // handlers and packed only when asked for).
  std::vector<std::string> cases = {"latency", "blocking", "bandwidth", "rate", "threads", "idle"};
  // The tocl networks whose cases run: shm, tcp, via. via runs tocl over via
  // next to tocl over tcp and raw tcp (latency, bandwidth, rate).
  std::vector<std::string> networks = {"shm", "tcp"};
  int repeats = 5;                         // rounds of interleaved runs (at least 5)
  std::chrono::milliseconds run{150};      // measured time of one run
  std::chrono::milliseconds warmup{30};    // unmeasured traffic before it
  std::chrono::milliseconds idle{10'000};  // the idle-CPU windows
  bool quick = false;                      // short runs and idle windows: a smoke test
  bool baselines_only = false;             // measure the baselines, never start tocl
  // UCX and Open MPI in the same rounds as tocl's latency, rate and
  // bandwidth cases (bench/README.md); an error when they are not installed.
  bool peers = false;
  std::string toclsd_path;     // the daemon to start...
  std::string daemon_address;  // ...unless this names a running one
};

// The case group names --cases accepts.
const std::vector<std::string>& MsgCaseNames();
// The network names --network accepts.
const std::vector<std::string>& MsgNetworkNames();

// Runs the chosen groups and adds their figures to `report`. Progress goes
// to stderr. An error means a run could not be made (not a missed target).
Status RunMsgBench(const MsgBenchOptions& options, Report& report);

}  // namespace tocl::bench
