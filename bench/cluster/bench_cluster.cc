#include "cluster/bench_cluster.h"

#include <fmt/format.h>

#include <cstdio>
#include <vector>

namespace tocl::bench {

Result<std::unique_ptr<testing::NetnsCluster>> StartBenchCluster(std::string_view suite, int hosts,
                                                                 const std::string& toclsd_path) {
  if (auto why = testing::NetnsCluster::Unsupported()) {
    fmt::print(stderr, "tocl-bench {}: skipped: {}\n", suite, *why);
    return std::unique_ptr<testing::NetnsCluster>();
  }
  testing::NetnsClusterOptions options;
  options.hosts = hosts;
  options.networks = std::vector<testing::NetnsLinkSpec>(1);
  options.toclsd_path = toclsd_path;
  options.daemon_log_level = "warn";
  TOCL_ASSIGN_OR_RETURN(auto cluster, testing::NetnsCluster::Create(std::move(options)));
  fmt::print(stderr, "{}: cluster up\n{}", suite, cluster->Describe());
  return cluster;
}

}  // namespace tocl::bench
