// The netns cluster the cluster benchmarks run on: `hosts` hosts on one
// unshaped veth network (tests/netns), every daemon at log level warn.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "netns_cluster.h"
#include "tocl/status.h"

namespace tocl::bench {

// The cluster, up; or null when network namespaces cannot be used here
// (not root, ...): then "tocl-bench WHAT: skipped: WHY" is printed on
// stderr, and the benchmark is to return ok (a skipped run exits 0).
Result<std::unique_ptr<testing::NetnsCluster>> StartBenchCluster(std::string_view what, int hosts,
                                                                 const std::string& toclsd_path);

}  // namespace tocl::bench
