// `make package`'s Debian packages (CPack DEB), made from the build under
// test: what each holds, its control files, and lintian's verdict.
#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "install_support.h"

namespace tocl::testing {
namespace {

// The .deb files cpack wrote into `dir`, by package name.
std::map<std::string, std::string> Packages(const std::string& dir) {
  std::map<std::string, std::string> packages;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string file = entry.path().filename();
    if (entry.path().extension() == ".deb") packages[file.substr(0, file.find('_'))] = entry.path();
  }
  return packages;
}

TEST_CASE(
    "the Debian packages hold the library, the headers and the daemon with its unit, config "
    "and user, and lintian finds no errors",
    "[install][package]") {
  const std::string dpkg_deb = RequireProgram("dpkg-deb");
  const std::string lintian = RequireProgram("lintian");
  TempDir dir("tocl-package-");
  RunOk({Build().cpack, "-G", "DEB", "--config", Build().binary_dir + "/CPackConfig.cmake", "-B",
         dir.path()},
        std::chrono::minutes(10));
  std::map<std::string, std::string> debs = Packages(dir.path());
  REQUIRE(debs.size() == 3);
  REQUIRE(debs.contains("libtocl0"));
  REQUIRE(debs.contains("libtocl-dev"));
  REQUIRE(debs.contains("toclsd"));
  const std::string& version = Build().version;

  const std::string library = RunOk({dpkg_deb, "-c", debs["libtocl0"]});
  CHECK_THAT(library, Catch::Contains("./usr/" + Build().libdir + "/libtocl.so." + version) &&
                          Catch::Contains("./usr/" + Build().libdir +
                                          "/libtocl.so.0 -> libtocl.so." + version) &&
                          Catch::Contains("./usr/share/doc/libtocl0/copyright") &&
                          Catch::Contains("./usr/share/doc/libtocl0/changelog.gz"));
  CHECK_THAT(library, !Catch::Contains("./usr/include") && !Catch::Contains("libtocl.a") &&
                          !Catch::Contains("./usr/" + Build().libdir + "/libtocl.so ->"));
  CHECK_THAT(library,
             Catch::Contains("-rw-r--r-- root/root") && !Catch::Contains("-rwxr-xr-x root/root"));

  const std::string dev = RunOk({dpkg_deb, "-c", debs["libtocl-dev"]});
  CHECK_THAT(dev,
             Catch::Contains("./usr/include/tocl/runtime.h") &&
                 Catch::Contains("./usr/include/tocl/export.h") &&
                 Catch::Contains("./usr/include/tocl/version.h") &&
                 Catch::Contains("./usr/" + Build().libdir + "/libtocl.a") &&
                 Catch::Contains("./usr/" + Build().libdir + "/libtocl.so -> libtocl.so.0") &&
                 Catch::Contains("./usr/" + Build().libdir + "/cmake/tocl/tocl-config.cmake") &&
                 Catch::Contains("./usr/" + Build().libdir + "/cmake/tocl/tocl-targets.cmake") &&
                 Catch::Contains("./usr/" + Build().libdir + "/pkgconfig/tocl.pc"));
  CHECK_THAT(RunOk({dpkg_deb, "-f", debs["libtocl-dev"], "Depends"}),
             Catch::Contains("libtocl0 (= " + version + ")"));

  const std::string daemon = RunOk({dpkg_deb, "-c", debs["toclsd"]});
  CHECK_THAT(daemon, Catch::Contains("./usr/sbin/toclsd") &&
                         Catch::Contains("./usr/sbin/toclsd-exec") &&
                         Catch::Contains("./usr/bin/tocl") &&
                         Catch::Contains("./lib/systemd/system/toclsd.service") &&
                         Catch::Contains("./etc/tocl/toclsd.toml") &&
                         Catch::Contains("./usr/share/man/man8/toclsd.8.gz") &&
                         Catch::Contains("./usr/share/man/man1/tocl.1.gz") &&
                         Catch::Contains("./usr/share/bash-completion/completions/tocl") &&
                         Catch::Contains("./usr/share/doc/toclsd/copyright"));
  // The unit starts the packaged daemon with the packaged config, as `tocl`.
  const std::string unit = ShellOk(dpkg_deb + " --fsys-tarfile " + debs["toclsd"] +
                                   " | tar -xO ./lib/systemd/system/toclsd.service");
  CHECK_THAT(unit, Catch::Contains("ExecStart=/usr/sbin/toclsd --config /etc/tocl/toclsd.toml") &&
                       Catch::Contains("User=tocl"));
  CHECK(RunOk({dpkg_deb, "-I", debs["toclsd"], "conffiles"}) == "/etc/tocl/toclsd.toml\n");
  CHECK_THAT(RunOk({dpkg_deb, "-I", debs["toclsd"], "postinst"}),
             Catch::Contains("adduser --system --group"));
  CHECK_THAT(RunOk({dpkg_deb, "-f", debs["toclsd"], "Depends"}), Catch::Contains("adduser"));

  // Errors fail the test; warnings are listed in its output.
  Result<ProgramResult> lint = RunProgram(
      {lintian, "--fail-on", "error", debs["libtocl0"], debs["libtocl-dev"], debs["toclsd"]},
      std::chrono::minutes(10));
  REQUIRE(lint.status().message() == "");
  INFO(lint->output);
  CHECK(lint->exit_code == 0);
  CHECK_THAT(lint->output, !Catch::Contains("\nE: ") && !Catch::StartsWith("E: "));
  WARN("lintian:\n" << lint->output);
}

}  // namespace
}  // namespace tocl::testing
