// Skips a Catch2 test (a warning with the reason, then return) when network
// namespaces cannot be used here (NetnsCluster::Unsupported()).
//
//   TEST_CASE("a 64 MiB message crosses two networks", "[netns]") {
//     TOCL_SKIP_WITHOUT_NETNS();
//     auto cluster = REQUIRE_VALUE(NetnsCluster::Create({}));
#pragma once

#include <catch2/catch.hpp>

#include "netns_cluster.h"

#define TOCL_SKIP_WITHOUT_NETNS()                                              \
  do {                                                                         \
    if (auto tocl_netns_why_ = ::tocl::testing::NetnsCluster::Unsupported()) { \
      WARN("skipped: " << *tocl_netns_why_);                                   \
      return;                                                                  \
    }                                                                          \
  } while (false)
