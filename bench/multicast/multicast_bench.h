// `tocl-bench multicast`: 1 MiB from a thread on host 1 of a netns cluster
// (tests/netns) to 8 receivers on hosts 2 and 3 (two processes of two
// threads on each), by one Runtime::Multicast against 8 separate Sends of
// the same message, in interleaved rounds of the same run: the time each
// takes until it returns and the bytes host 1's interfaces sent meanwhile
// (bench/README.md).
#pragma once

#include <cstdint>
#include <string>

#include "report.h"
#include "tocl/status.h"

namespace tocl::bench {

struct MulticastBenchOptions {
  int repeats = 5;          // rounds (at least 5); each is one multicast and one set of sends
  bool quick = false;       // 5 rounds, whatever --repeats says: a smoke test
  std::string toclsd_path;  // the daemon each host runs
  uint64_t message_bytes = uint64_t{1} << 20;
  std::string rate;  // the network's tc rate ("" unlimited), e.g. "1gbit"
};

// Builds the cluster, measures, adds the figures to `report`. Progress goes
// to stderr. When network namespaces cannot be used here it says why on
// stderr and adds nothing (not an error).
Status RunMulticastBench(const MulticastBenchOptions& options, Report& report);

}  // namespace tocl::bench
