// tocl used from another project's build (add_subdirectory, as FetchContent
// does): the library and the tools, none of tocl's tests, benchmarks or
// install rules.
#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "install_support.h"

namespace tocl::testing {
namespace {

TEST_CASE(
    "a project that adds tocl with add_subdirectory gets the library and tools, not tocl's "
    "tests or benchmarks",
    "[install]") {
  TempDir dir("tocl-subproject-");
  std::ofstream(dir.File("CMakeLists.txt")) << "cmake_minimum_required(VERSION 3.25)\n"
                                               "project(outer LANGUAGES CXX)\n"
                                               "add_subdirectory("
                                            << Build().source_dir
                                            << " tocl)\n"
                                               "add_executable(app app.cc)\n"
                                               "target_link_libraries(app PRIVATE tocl::tocl)\n";
  std::ofstream(dir.File("app.cc"))
      << "#include <tocl/gid.h>\n"
         "int main() { return tocl::Gid::Host(1).is_host() ? 0 : 1; }\n";
  const std::string build = dir.File("build");
  RunOk({Build().cmake, "-S", dir.path(), "-B", build, "-G", Build().generator,
         "-DCMAKE_CXX_COMPILER=" + Build().cxx});

  const std::string cache = ReadFile(build + "/CMakeCache.txt");
  CHECK_THAT(cache, Catch::Contains("TOCL_BUILD_TESTS:BOOL=OFF") &&
                        Catch::Contains("TOCL_BUILD_BENCH:BOOL=OFF") &&
                        Catch::Contains("TOCL_INSTALL:BOOL=OFF"));
  // Catch2 was not even looked for.
  CHECK_THAT(cache, !Catch::Contains("Catch2_DIR"));

  // What the outer build can make (the generator's list of targets).
  const std::string targets = RunOk({Build().cmake, "--build", build, "--target", "help"});
  for (const char* wanted : {"tocl_runtime:", "tocl_shared:", "toclsd:", "toclsd-exec:", "tocl:"}) {
    CHECK_THAT(targets, Catch::Contains(wanted));
  }
  for (const char* unwanted : {"unit_core:", "integration_cli:", "tocl-bench:", "tocl_test_main:",
                               "install_tests:", "tocl-enroll-worker:", "package:"}) {
    CHECK_THAT(targets, !Catch::Contains(unwanted));
  }
  // No tests were registered with the outer project.
  CHECK_THAT(RunOk({Build().ctest, "--test-dir", build, "-N"}), Catch::Contains("Total Tests: 0"));
}

}  // namespace
}  // namespace tocl::testing
