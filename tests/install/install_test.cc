// `cmake --install` of the build tree: what lands under the prefix, and
// what libtocl.so exports.
#include <catch2/catch.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "install_support.h"

namespace tocl::testing {
namespace {

TEST_CASE(
    "cmake --install puts one library, its headers, the tools, the CMake package and "
    "tocl.pc under the prefix",
    "[install]") {
  TempDir dir("tocl-install-");
  const std::string prefix = InstallInto(dir);
  const std::string& version = Build().version;
  const std::string major = version.substr(0, version.find('.'));

  for (const std::string& file :
       std::vector<std::string>{"include/tocl/runtime.h",
                                "include/tocl/directory_client.h",
                                "include/tocl/export.h",
                                "include/tocl/version.h",
                                Build().libdir + "/libtocl.so." + version,
                                Build().libdir + "/libtocl.so." + major,
                                Build().libdir + "/libtocl.so",
                                Build().libdir + "/libtocl.a",
                                Build().libdir + "/cmake/tocl/tocl-config.cmake",
                                Build().libdir + "/cmake/tocl/tocl-config-version.cmake",
                                Build().libdir + "/cmake/tocl/tocl-targets.cmake",
                                Build().libdir + "/cmake/tocl/tocl-static-targets.cmake",
                                Build().libdir + "/pkgconfig/tocl.pc",
                                "sbin/toclsd",
                                "sbin/toclsd-exec",
                                "bin/tocl",
                                "share/man/man1/tocl.1.gz",
                                "share/man/man8/toclsd.8.gz",
                                "share/bash-completion/completions/tocl",
                                "share/bash-completion/completions/toclsd",
                                "lib/systemd/system/toclsd.service",
                                "etc/tocl/toclsd.toml"}) {
    CHECK(Exists(prefix + "/" + file));
  }
  // One library: none of the layers, no private headers, no Debian files.
  for (const std::string& file : std::vector<std::string>{
           Build().libdir + "/libtocl_core.a", Build().libdir + "/libtocl_runtime.a",
           "include/tocl/version.h.in", "include/core/posix.h", "share/doc/libtocl0/copyright"}) {
    CHECK_FALSE(Exists(prefix + "/" + file));
  }

  const std::string dynamic =
      RunOk({Build().readelf, "-d", prefix + "/" + Build().libdir + "/libtocl.so"});
  CHECK_THAT(dynamic, Catch::Contains("Library soname: [libtocl.so." + major + "]"));

  // The unit names the toclsd and the config of this prefix.
  CHECK_THAT(ReadFile(prefix + "/lib/systemd/system/toclsd.service"),
             Catch::Contains("ExecStart=" + prefix + "/sbin/toclsd --config " + prefix +
                             "/etc/tocl/toclsd.toml"));

  // Public headers show nothing of the private dependencies.
  const std::string includes =
      ShellOk("cat '" + prefix + "/include/tocl/'*.h | grep '^#include' | sort -u");
  for (const char* dependency : {"grpc", "google/protobuf", "spdlog", "fmt/", "openssl", "absl"}) {
    CHECK_THAT(includes, !Catch::Contains(dependency));
  }

  // One version number for every program.
  for (const std::string program : {"sbin/toclsd", "sbin/toclsd-exec", "bin/tocl"}) {
    const std::string name = program.substr(program.find('/') + 1);
    CHECK(RunOk({prefix + "/" + program, "--version"}) == name + " " + version + "\n");
  }
}

TEST_CASE("libtocl.so exports tocl's API and nothing of gRPC, protobuf, spdlog, absl or OpenSSL",
          "[install]") {
  const std::string symbols =
      RunOk({Build().nm, "-D", "--defined-only", "-C", Build().shared_library});
  std::istringstream lines(symbols);
  std::string line;
  size_t count = 0;
  std::vector<std::string> foreign;
  while (std::getline(lines, line)) {
    // "0000000000123450 T tocl::Runtime::Start(tocl::RuntimeOptions)"
    const std::string name = line.size() > 19 ? line.substr(19) : line;
    ++count;
    const bool ours = name.starts_with("tocl::") || name.starts_with("typeinfo for tocl::") ||
                      name.starts_with("typeinfo name for tocl::") ||
                      name.starts_with("vtable for tocl::");
    if (!ours) foreign.push_back(line);
  }
  INFO(count << " exported symbols");
  CHECK(foreign.empty());
  for (const std::string& symbol : foreign) UNSCOPED_INFO(symbol);
  CHECK(count > 100);
  CHECK_THAT(symbols, Catch::Contains("tocl::Runtime::Start(tocl::RuntimeOptions)") &&
                          Catch::Contains("tocl::DirectoryClient::Connect(") &&
                          Catch::Contains("tocl::LibraryVersion()"));
  // Nothing internal to tocl either: the layers' namespaces, the
  // directory's generated code, the runtime's insides.
  for (const char* internal :
       {"tocl::buffers::", "tocl::client::", "tocl::grpc_tls::", "tocl::runtime::",
        "tocl::security::", "tocl::subsystem::", "tocl::wire::", "tocl::directory::", "::Impl::"}) {
    CHECK_THAT(symbols, !Catch::Contains(internal));
  }
}

TEST_CASE("every program of the build prints the one version number with --version", "[install]") {
  std::istringstream programs(TOCL_PROGRAMS);
  std::string program;
  size_t count = 0;
  while (std::getline(programs, program, ',')) {
    const std::string name = program.substr(program.rfind('/') + 1);
    CHECK(RunOk({program, "--version"}, std::chrono::seconds(10)) ==
          name + " " + Build().version + "\n");
    ++count;
  }
  CHECK(count >= 5);
}

}  // namespace
}  // namespace tocl::testing
