// `tocl-bench visibility`: how long a thread that Runtime::EnrollThread
// just returned takes to be returned by a Query, on the same host (the
// daemon the thread's process enrolled with) and, with --cluster, on
// another host of a netns cluster (its replica). Baseline, in the same
// rounds: the same thread registered by a synchronous
// ProcessSession::RegisterThreads instead of the runtime's registrar, timed
// from the call, polled the same way (across hosts: the replication time
// `tocl-bench directory --cluster` measures, plus the poll).
#pragma once

#include <string>

#include "report.h"
#include "tocl/status.h"

namespace tocl::bench {

struct VisibilityBenchOptions {
  int repeats = 5;
  int samples = 100;  // enrolled threads per case and round
  bool cluster = false;
  std::string toclsd_path;
  std::string daemon_address;  // one host only: an already running daemon
};

Status RunVisibilityBench(const VisibilityBenchOptions& options, Report& report);

}  // namespace tocl::bench
