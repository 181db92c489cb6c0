#include "descriptor_limit.h"

#include <sys/resource.h>

#include <catch2/catch.hpp>

namespace tocl::daemon {
namespace {

TEST_CASE("the daemon's soft descriptor limit is raised to its hard limit", "[limits]") {
  rlimit before{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &before) == 0);
  const Result<rlimit> raised = RaiseDescriptorLimit();
  REQUIRE(raised.status().message() == "");
  CHECK(raised->rlim_cur == before.rlim_max);
  CHECK(raised->rlim_max == before.rlim_max);
  rlimit after{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &after) == 0);
  CHECK(after.rlim_cur == after.rlim_max);
  // Again: nothing left to raise.
  CHECK(RaiseDescriptorLimit().value_or(rlimit{}).rlim_cur == after.rlim_max);
}

}  // namespace
}  // namespace tocl::daemon
