// `tocl-bench notify`: how long after `kill -9` of a process its watcher
// hears of it through Runtime::Notify, as a callback and as a message to a
// thread blocked in RecvFor, next to what the kernel (a pidfd) and the
// directory (Watch streams) showed for the same kill. One host, or with
// --cluster two hosts in network namespaces (root): the target on h2, the
// watcher on h1. See bench/README.md.
#pragma once

#include <string>

#include "report.h"
#include "tocl/status.h"

namespace tocl::bench {

struct NotifyBenchOptions {
  int repeats = 5;  // rounds (at least 5 are run)
  int kills = 20;   // per round, the kinds of target taking turns
  bool quick = false;
  bool cluster = false;
  std::string toclsd_path;
};

Status RunNotifyBench(const NotifyBenchOptions& options, Report& report);

}  // namespace tocl::bench
