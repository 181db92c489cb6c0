// `tocl-bench directory --cluster`: the replicated directory on three hosts
// of a netns cluster (tests/netns): how long a registration on one host
// takes to be seen on the others, how long a million threads take to
// replicate, and Lookup/Query latency on a replica against the same calls
// on the host that owns the rows (interleaved rounds).
#pragma once

#include <cstdint>
#include <string>

#include "report.h"
#include "tocl/status.h"

namespace tocl::bench {

struct ClusterDirectoryBenchOptions {
  int repeats = 5;
  uint64_t threads = 1'000'000;  // registered in total, spread evenly over the hosts
  uint32_t batch = 1000;
  int propagation_samples = 100;  // registrations per round
  int query_calls = 100;          // per case and round
  std::string toclsd_path;
};

Status RunClusterDirectoryBench(const ClusterDirectoryBenchOptions& options, Report& report);

}  // namespace tocl::bench
