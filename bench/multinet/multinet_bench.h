// `tocl-bench multinet`: long-message throughput between two hosts of a
// netns cluster (tests/netns) over one network and over two at once, against
// raw TCP and the networks' configured rates, in the same run
// (bench/README.md).
#pragma once

#include <cstdint>
#include <string>

#include "report.h"
#include "tocl/status.h"

namespace tocl::bench {

struct MultinetBenchOptions {
  int repeats = 5;              // rounds of interleaved runs (at least 5)
  bool quick = false;           // fewer messages per run: a smoke test
  bool baselines_only = false;  // raw TCP only: no tocl peer runs
  std::string toclsd_path;      // the daemon each host runs
  uint64_t message_bytes = uint64_t{16} << 20;
};

// Builds the cluster, runs the case groups and adds their figures to
// `report`. Progress goes to stderr. When network namespaces cannot be used
// here it says why on stderr and adds nothing (not an error). An error means
// a run could not be made (not a missed target).
Status RunMultinetBench(const MultinetBenchOptions& options, Report& report);

}  // namespace tocl::bench
