// tocl keygen's output (security/keygen.h) and loading it back
// (security/credentials.h), with the errors a misconfigured host gets.
#include "security/credentials.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "security/keygen.h"
#include "temp_dir.h"

namespace tocl::security {
namespace {

using testing::TempDir;

mode_t Mode(const std::string& path) {
  struct stat st {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

TEST_CASE("keygen writes a CA, a directory per host and one secret, which load back",
          "[security]") {
  TempDir dir("tocl-keygen-");
  const std::string root = dir.File("creds");
  auto written =
      GenerateCredentials({.directory = root, .hosts = {{"h1", {}}, {"h2", {"10.0.0.2"}}}});
  REQUIRE(written.ok());
  CHECK(written->size() == 3 + 2 * 4);
  CHECK(Mode(root) == 0700);
  CHECK(Mode(root + "/ca/ca.key") == 0600);
  CHECK(Mode(root + "/h1") == 0700);
  CHECK(Mode(root + "/h1/key.pem") == 0600);
  CHECK(Mode(root + "/h1/cluster.secret") == 0600);

  auto h1 = LoadCredentials(root + "/h1");
  REQUIRE(h1.ok());
  auto h2 = LoadCredentials(root + "/h2");
  REQUIRE(h2.ok());
  CHECK(h1->host == "h1");
  CHECK(h2->host == "h2");
  CHECK_FALSE(h1->secret.none());
  CHECK(h1->secret.Hex() == h2->secret.Hex());
  CHECK(h1->ca_pem == h2->ca_pem);
  CHECK(h1->cert_pem != h2->cert_pem);

  // Run again for a new host: same CA, same secret; an existing host is
  // not replaced.
  auto again = GenerateCredentials({.directory = root, .hosts = {{"h3", {}}}});
  REQUIRE(again.ok());
  CHECK(again->size() == 4);
  auto h3 = LoadCredentials(root + "/h3");
  REQUIRE(h3.ok());
  CHECK(h3->secret.Hex() == h1->secret.Hex());
  CHECK(h3->ca_pem == h1->ca_pem);
  auto twice = GenerateCredentials({.directory = root, .hosts = {{"h1", {}}}});
  CHECK(twice.status().code() == StatusCode::kAlreadyExists);
  CHECK_THAT(twice.status().message(), Catch::Contains("remove it"));

  CHECK(GenerateCredentials({.directory = root, .hosts = {}}).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK_THAT(GenerateCredentials({.directory = root, .hosts = {{"../x", {}}}}).status().message(),
             Catch::Contains("host name '../x'"));
  CHECK(GenerateCredentials({.directory = root, .hosts = {{"ca", {}}}}).status().code() ==
        StatusCode::kInvalidArgument);
}

TEST_CASE("credentials that are missing, exposed, mismatched or from another CA are refused",
          "[security]") {
  TempDir dir("tocl-keygen-");
  const std::string root = dir.File("creds");
  REQUIRE(GenerateCredentials({.directory = root, .hosts = {{"h1", {}}, {"h2", {}}}}).ok());
  const std::string other = dir.File("other");
  REQUIRE(GenerateCredentials({.directory = other, .hosts = {{"h1", {}}}}).ok());
  const std::string h1 = root + "/h1";

  SECTION("a missing directory or file") {
    auto missing = LoadCredentials(dir.File("nowhere"));
    CHECK(missing.status().code() == StatusCode::kNotFound);
    CHECK_THAT(missing.status().message(),
               Catch::Contains("ca.pem is missing") && Catch::Contains("tocl keygen"));
    std::filesystem::remove(h1 + "/cluster.secret");
    CHECK_THAT(LoadCredentials(h1).status().message(),
               Catch::Contains("cluster.secret is missing"));
  }
  SECTION("a key or secret others can read") {
    REQUIRE(chmod((h1 + "/key.pem").c_str(), 0644) == 0);
    auto exposed = LoadCredentials(h1);
    CHECK(exposed.status().code() == StatusCode::kPermissionDenied);
    CHECK_THAT(exposed.status().message(),
               Catch::Contains("key.pem can be read by others (mode 0644)") &&
                   Catch::Contains("chmod 600"));
    REQUIRE(chmod((h1 + "/key.pem").c_str(), 0600) == 0);
    REQUIRE(chmod((h1 + "/cluster.secret").c_str(), 0640) == 0);
    CHECK(LoadCredentials(h1).status().code() == StatusCode::kPermissionDenied);
  }
  SECTION("another host's key") {
    Write(h1 + "/key.pem", Read(root + "/h2/key.pem"));
    CHECK_THAT(LoadCredentials(h1).status().message(), Catch::Contains("is not the key of"));
  }
  SECTION("a certificate of another cluster's CA") {
    Write(h1 + "/ca.pem", Read(other + "/h1/ca.pem"));
    auto foreign = LoadCredentials(h1);
    CHECK(foreign.status().code() == StatusCode::kPermissionDenied);
    CHECK_THAT(foreign.status().message(), Catch::Contains("does not verify against ca.pem"));
  }
  SECTION("garbage instead of PEM, a bad secret") {
    Write(h1 + "/cert.pem", "not a certificate\n");
    CHECK_THAT(LoadCredentials(h1).status().message(),
               Catch::Contains("cert.pem is not a PEM certificate"));
    Write(h1 + "/cert.pem", Read(root + "/h1/ca.pem"));  // restore something parseable
    Write(h1 + "/cluster.secret", "xyz\n");
    CHECK_THAT(LoadCredentials(h1).status().message(), Catch::Contains("cluster.secret"));
  }
}

}  // namespace
}  // namespace tocl::security
