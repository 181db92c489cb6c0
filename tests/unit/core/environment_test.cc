// Settings the environment fills in (core/environment.h), and the tests'
// guard that puts the environment back (tests/support/scoped_environment.h).
#include "core/environment.h"

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <cstdlib>

#include "scoped_environment.h"

namespace tocl {
namespace {

TEST_CASE("a setting is the caller's value, else the environment's, else the fallback",
          "[environment]") {
  testing::ScopedEnvironment environment;
  environment.Unset("TOCL_TEST_SETTING");
  CHECK(FromEnvironment("TOCL_TEST_SETTING") == "");
  CHECK(FromEnvironment("TOCL_TEST_SETTING", "fallback") == "fallback");
  CHECK(ValueOrEnvironment("given", "TOCL_TEST_SETTING", "fallback") == "given");
  CHECK(ValueOrEnvironment("", "TOCL_TEST_SETTING", "fallback") == "fallback");
  environment.Set("TOCL_TEST_SETTING", "");  // empty counts as unset
  CHECK(FromEnvironment("TOCL_TEST_SETTING", "fallback") == "fallback");
  environment.Set("TOCL_TEST_SETTING", "from env");
  CHECK(FromEnvironment("TOCL_TEST_SETTING", "fallback") == "from env");
  CHECK(ValueOrEnvironment("", "TOCL_TEST_SETTING", "fallback") == "from env");
  CHECK(ValueOrEnvironment("given", "TOCL_TEST_SETTING") == "given");
}

TEST_CASE("a scoped environment puts the variables back as they were", "[environment]") {
  ::setenv("TOCL_TEST_KEPT", "before", 1);
  ::unsetenv("TOCL_TEST_ABSENT");
  {
    testing::ScopedEnvironment environment;
    environment.Unset("TOCL_TEST_KEPT");
    environment.Set("TOCL_TEST_KEPT", "during");
    environment.Set("TOCL_TEST_ABSENT", "during");
    CHECK(FromEnvironment("TOCL_TEST_KEPT") == "during");
  }
  CHECK(FromEnvironment("TOCL_TEST_KEPT") == "before");
  CHECK(std::getenv("TOCL_TEST_ABSENT") == nullptr);
  ::unsetenv("TOCL_TEST_KEPT");
}

}  // namespace
}  // namespace tocl
