// `tocl keygen`: the files it writes and their modes, what it prints, and
// what it refuses (a host that has credentials, bad names, bad flags).
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "daemon_harness.h"
#include "security/credentials.h"

namespace tocl::testing {
namespace {

using namespace std::chrono_literals;

ProgramResult Keygen(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {CliPath(), "keygen"};
  argv.insert(argv.end(), args.begin(), args.end());
  Result<ProgramResult> run = RunProgram(argv, 60s);
  REQUIRE(run.ok());
  UNSCOPED_INFO("tocl keygen -> exit " << run->exit_code << "\n" << run->output);
  return *run;
}

// The permission bits of `path`, or -1 when it is missing.
int ModeOf(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return -1;
  return static_cast<int>(info.st_mode & 07777);
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

TEST_CASE("tocl keygen writes a CA and a directory per host with private modes",
          "[integration][cli][security]") {
  TempDir dir("tocl-keygen-");
  const std::string cluster = dir.File("cluster");
  ProgramResult made = Keygen({cluster, "--host", "node-a", "--host", "node-b=10.0.0.2,b.example"});
  REQUIRE(made.exit_code == 0);
  for (const std::string file :
       {"ca/ca.pem", "ca/ca.key", "ca/cluster.secret", "node-a/ca.pem", "node-a/cert.pem",
        "node-a/key.pem", "node-a/cluster.secret", "node-b/key.pem"}) {
    CHECK_THAT(made.output, Catch::Contains("wrote " + cluster + "/" + file + "\n"));
  }
  // What to do next: copy, configure, keep the CA key away.
  CHECK_THAT(made.output, Catch::Contains("copy " + cluster + "/node-a to host node-a") &&
                              Catch::Contains("credentials = ") &&
                              Catch::Contains("keep " + cluster + "/ca/ca.key off the hosts"));

  CHECK(ModeOf(cluster) == 0700);
  CHECK(ModeOf(cluster + "/ca") == 0700);
  CHECK(ModeOf(cluster + "/ca/ca.key") == 0600);
  CHECK(ModeOf(cluster + "/ca/cluster.secret") == 0600);
  CHECK(ModeOf(cluster + "/node-a") == 0700);
  CHECK(ModeOf(cluster + "/node-a/key.pem") == 0600);
  CHECK(ModeOf(cluster + "/node-a/cluster.secret") == 0600);
  CHECK(ModeOf(cluster + "/node-a/cert.pem") == 0644);
  CHECK(ModeOf(cluster + "/node-a/ca.pem") == 0644);

  // Each host directory loads as that host's credentials.
  for (const std::string host : {"node-a", "node-b"}) {
    Result<security::Credentials> loaded = security::LoadCredentials(cluster + "/" + host);
    REQUIRE(loaded.status().message() == "");
    CHECK(loaded->host == host);
    CHECK(loaded->secret.bytes().size() == 32);
  }

  // A host added later gets the same CA and secret; one that exists is
  // refused and left as it was.
  const std::string key_before = ReadFile(cluster + "/node-a/key.pem");
  ProgramResult again = Keygen({cluster, "--host", "node-c", "--host", "node-a"});
  CHECK(again.exit_code == 2);
  CHECK_THAT(again.output, Catch::StartsWith("tocl: " + cluster + "/node-a exists"));
  CHECK(ModeOf(cluster + "/node-c") == -1);
  CHECK(ReadFile(cluster + "/node-a/key.pem") == key_before);
  ProgramResult later = Keygen({cluster, "--host", "node-c"});
  REQUIRE(later.exit_code == 0);
  CHECK_THAT(later.output, !Catch::Contains("wrote " + cluster + "/ca/"));
  CHECK(ReadFile(cluster + "/node-c/ca.pem") == ReadFile(cluster + "/ca/ca.pem"));
  CHECK(ReadFile(cluster + "/node-c/cluster.secret") == ReadFile(cluster + "/ca/cluster.secret"));
}

TEST_CASE("tocl keygen refuses bad host names and flags with exit 2",
          "[integration][cli][security]") {
  TempDir dir("tocl-keygen-");
  const std::string cluster = dir.File("cluster");
  for (const std::string host : {"ca", "a/b", "", ".hidden", "with space"}) {
    ProgramResult refused = Keygen({cluster, "--host", host});
    CHECK(refused.exit_code == 2);
    CHECK_THAT(refused.output, Catch::StartsWith("tocl: host name '" + host + "'"));
  }
  ProgramResult empty_extra = Keygen({cluster, "--host", "node-a=10.0.0.1,"});
  CHECK(empty_extra.exit_code == 2);
  CHECK_THAT(empty_extra.output, Catch::Contains("an empty extra name"));
  ProgramResult no_host = Keygen({cluster});
  CHECK(no_host.exit_code == 2);
  CHECK_THAT(no_host.output, Catch::StartsWith("tocl: ") && Catch::Contains("--host"));
  ProgramResult no_days = Keygen({cluster, "--host", "node-a", "--days", "0"});
  CHECK(no_days.exit_code == 2);
  // Nothing was written by any of them.
  CHECK(ModeOf(cluster) == -1);

  ProgramResult help = Keygen({"--help"});
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.output, Catch::Contains("DIR") && Catch::Contains("--host") &&
                              Catch::Contains("NAME[=EXTRA,EXTRA...]") &&
                              Catch::Contains("--days"));
}

}  // namespace
}  // namespace tocl::testing
