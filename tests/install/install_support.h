// What the install tests share: the build under test (paths CMake gives),
// running its programs and tools, and installing it into a temporary
// prefix as a user would (`cmake --install BUILD --prefix P`).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "child_process.h"
#include "temp_dir.h"

namespace tocl::testing {

// The build tree under test and the tools its configure step found.
struct BuildUnderTest {
  std::string source_dir;
  std::string binary_dir;
  std::string cmake;
  std::string cpack;
  std::string ctest;
  std::string generator;  // "Ninja"
  std::string cxx;        // the C++ compiler
  std::string cxx_flags;  // the build's CMAKE_CXX_FLAGS (sanitizers)
  std::string exe_linker_flags;
  std::string nm;
  std::string readelf;
  std::string version;         // the project's VERSION
  std::string libdir;          // CMAKE_INSTALL_LIBDIR: lib/x86_64-linux-gnu on Debian
  std::string shared_library;  // the build's libtocl.so.MAJOR.MINOR.PATCH
};
const BuildUnderTest& Build();

// Runs `argv` (argv[0] a path) to completion within `timeout`, REQUIREs that
// it exits 0 (the failure message has its command line and output) and
// returns its output.
std::string RunOk(const std::vector<std::string>& argv,
                  std::chrono::milliseconds timeout = std::chrono::minutes(3),
                  const std::vector<std::string>& env = {});

// Runs a command line through /bin/sh -c, like RunOk: for commands a user
// types, such as `g++ ... $(pkg-config --cflags --libs tocl)`.
std::string ShellOk(const std::string& command,
                    std::chrono::milliseconds timeout = std::chrono::minutes(3),
                    const std::vector<std::string>& env = {});

// `cmake --install` of the build under test into `dir`/prefix; returns the prefix.
std::string InstallInto(const TempDir& dir);

// A program that must be on this machine (deploy/install-deps.sh installs
// it): its path, or a failed REQUIRE naming it.
std::string RequireProgram(const std::string& name);

std::string ReadFile(const std::string& path);
bool Exists(const std::string& path);

}  // namespace tocl::testing
