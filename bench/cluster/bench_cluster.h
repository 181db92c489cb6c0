// The network-namespace cluster a benchmark suite runs on (tests/netns):
// `hosts` hosts on one unshaped veth network, their daemons logging
// warnings only.
//
//   TOCL_ASSIGN_OR_RETURN(auto cluster, StartBenchCluster("spawn", 2, options.toclsd_path));
//   if (cluster == nullptr) return Status::Ok();  // skipped: not root, no `ip netns`, ...
//
// Progress goes to stderr: "tocl-bench SUITE: skipped: WHY" when namespaces
// cannot be used, else "SUITE: cluster up" and the hosts.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "netns_cluster.h"
#include "tocl/status.h"

namespace tocl::bench {

Result<std::unique_ptr<testing::NetnsCluster>> StartBenchCluster(std::string_view suite, int hosts,
                                                                 const std::string& toclsd_path);

}  // namespace tocl::bench
