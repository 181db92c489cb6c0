// `tocl-bench spawn`: remote thread spawn and remote process spawn latency
// between two hosts of a netns cluster (tests/netns), each against a
// same-run baseline: a tocl message round trip between the same two
// processes (threads), starting the same program without tocl (processes).
#pragma once

#include <string>

#include "report.h"
#include "tocl/status.h"

namespace tocl::bench {

struct SpawnBenchOptions {
  int repeats = 5;          // rounds of interleaved runs (at least 5)
  bool quick = false;       // fewer samples per run: a smoke test
  std::string toclsd_path;  // the daemon each host runs
};

// Builds a two-host cluster, measures, adds the figures to `report`. When
// network namespaces cannot be used here it says why on stderr and adds
// nothing (not an error).
Status RunSpawnBench(const SpawnBenchOptions& options, Report& report);

}  // namespace tocl::bench
