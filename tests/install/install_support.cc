#include "install_support.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

namespace tocl::testing {

const BuildUnderTest& Build() {
  static const BuildUnderTest build = {
      .source_dir = TOCL_SOURCE_DIR,
      .binary_dir = TOCL_BINARY_DIR,
      .cmake = TOCL_CMAKE_COMMAND,
      .cpack = TOCL_CPACK_COMMAND,
      .ctest = TOCL_CTEST_COMMAND,
      .generator = TOCL_CMAKE_GENERATOR,
      .cxx = TOCL_CXX_COMPILER,
      .cxx_flags = TOCL_CXX_FLAGS,
      .exe_linker_flags = TOCL_EXE_LINKER_FLAGS,
      .nm = TOCL_NM,
      .readelf = TOCL_READELF,
      .version = TOCL_VERSION,
      .libdir = TOCL_INSTALL_LIBDIR,
      .shared_library = TOCL_SHARED_LIBRARY,
  };
  return build;
}

namespace {

std::string CommandLine(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& arg : argv) line += (line.empty() ? "" : " ") + arg;
  return line;
}

}  // namespace

std::string RunOk(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                  const std::vector<std::string>& env) {
  Result<ProgramResult> result = RunProgram(argv, timeout, env);
  INFO(CommandLine(argv));
  REQUIRE(result.status().message() == "");
  INFO(result->output);
  REQUIRE_FALSE(result->timed_out);
  REQUIRE(result->exit_code == 0);
  return result->output;
}

std::string ShellOk(const std::string& command, std::chrono::milliseconds timeout,
                    const std::vector<std::string>& env) {
  return RunOk({"/bin/sh", "-c", command}, timeout, env);
}

std::string InstallInto(const TempDir& dir) {
  const std::string prefix = dir.File("prefix");
  RunOk({Build().cmake, "--install", Build().binary_dir, "--prefix", prefix});
  return prefix;
}

std::string RequireProgram(const std::string& name) {
  Result<std::string> path = FindProgram(name);
  INFO(name << " is missing: deploy/install-deps.sh installs it");
  REQUIRE(path.ok());
  return *path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

bool Exists(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0;
}

}  // namespace tocl::testing
