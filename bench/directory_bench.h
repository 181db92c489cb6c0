// `tocl-bench directory`: the directory daemon's figures (bench/README.md).
#pragma once

#include <cstdint>
#include <string>

#include "report.h"
#include "tocl/status.h"

namespace tocl::bench {

struct DirectoryBenchOptions {
  uint64_t threads = 1'000'000;  // registered in total, over all rounds and cases
  int repeats = 5;               // rounds of interleaved baseline/measured runs
  uint32_t batch = 1000;         // threads per RegisterThreads call
  int writers = 4;               // concurrent sessions in the concurrent case
  int lookup_calls = 2000;       // per round, for Lookup and for Ping each
  int query_calls = 200;         // per query case, over all rounds
  std::string toclsd_path;       // the daemon to start...
  std::string daemon_address;    // ...unless this names a running one
};

// Runs every phase and adds its figures to `report`. Progress goes to
// stderr. An error means a phase could not run (not that a target was missed).
Status RunDirectoryBench(const DirectoryBenchOptions& options, Report& report);

}  // namespace tocl::bench
