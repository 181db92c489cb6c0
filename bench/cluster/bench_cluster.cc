#include "cluster/bench_cluster.h"

#include <fmt/format.h>

#include <cstdio>
#include <vector>

namespace tocl::bench {

Result<std::unique_ptr<testing::NetnsCluster>> StartBenchCluster(std::string_view what, int hosts,
                                                                 const std::string& toclsd_path) {
  if (auto why = testing::NetnsCluster::Unsupported()) {
    fmt::print(stderr, "tocl-bench {}: skipped: {}\n", what, *why);
    return std::unique_ptr<testing::NetnsCluster>();
  }
  testing::NetnsClusterOptions options;
  options.hosts = hosts;
  options.networks = std::vector<testing::NetnsLinkSpec>(1);
  options.toclsd_path = toclsd_path;
  options.daemon_log_level = "warn";
  return testing::NetnsCluster::Create(std::move(options));
}

}  // namespace tocl::bench
