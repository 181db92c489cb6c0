// Cluster credentials in the daemon and its clients (issue #7 §1): gRPC
// over TCP is mutual TLS between daemons of one cluster and for clients
// with its credentials; another cluster's daemon or client, or one without
// credentials, gets nowhere; processes get the data-plane secret at
// enrollment; a daemon without credentials keeps to loopback.
//
// Real daemons on 127.0.0.1 with credentials made by GenerateCredentials in
// a temporary directory (tocl keygen's own tests: keygen_cli_test.cc).
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "daemon_harness.h"
#include "raw_directory.h"
#include "security/cluster_key.h"
#include "security/keygen.h"
#include "status_assertions.h"

namespace tocl::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::string kChild = TOCL_SPAWNED_CHILD_PATH;

// One cluster's credentials (one CA, one secret), a directory per host.
class ClusterCredentials {
 public:
  explicit ClusterCredentials(const std::vector<std::string>& hosts) : dir_("tocl-creds-") {
    security::KeygenOptions options;
    options.directory = dir_.File("cluster");
    for (const std::string& host : hosts) options.hosts.push_back({host, {}});
    Result<std::vector<std::string>> written = security::GenerateCredentials(options);
    REQUIRE(written.status().message() == "");
  }
  std::string Host(const std::string& name) const { return dir_.File("cluster/" + name); }
  // The data-plane secret as the raw bytes processes get.
  std::string SecretBytes() const {
    std::ifstream file(dir_.File("cluster/ca/cluster.secret"));
    std::stringstream text;
    text << file.rdbuf();
    Result<security::ClusterKey> key = security::ClusterKey::FromHex(text.str());
    REQUIRE(key.status().message() == "");
    std::span<const std::byte> bytes = key->bytes();
    return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }

 private:
  TempDir dir_;
};

std::vector<std::string> WithCredentials(const std::string& directory,
                                         std::vector<std::string> args = {}) {
  args.insert(args.end(), {"--credentials", directory});
  return args;
}

// The tests decide which credentials a client has; the environment must
// not add any.
void ClearCredentialsEnvironment() {
  ::unsetenv("TOCL_CREDENTIALS");
}

std::unique_ptr<Daemon> StartDaemon(DaemonOptions options) {
  auto daemon = std::make_unique<Daemon>(std::move(options));
  REQUIRE(daemon->Start().message() == "");
  return daemon;
}

// Entities matching `expression` on `daemon`, asked over its unix socket.
int CountMatches(const Daemon& daemon, const std::string& expression) {
  auto stub = NewRawStub(daemon.address());
  pb::QueryResponse response;
  if (!RawQuery(*stub, expression, {}, &response).ok()) return -1;
  return response.entities_size();
}

TEST_CASE("daemons with one cluster's credentials join, replicate and forward over mutual TLS",
          "[integration][security][cluster]") {
  ClusterCredentials cluster({"seed", "second"});
  DaemonOptions seed_options = LoopbackClusterMember("seed", WithCredentials(cluster.Host("seed")));
  seed_options.seed = true;
  auto seed = StartDaemon(seed_options);
  DaemonOptions second_options =
      LoopbackClusterMember("second", WithCredentials(cluster.Host("second")));
  second_options.join = {REQUIRE_VALUE(seed->tcp_address())};
  auto second = StartDaemon(second_options);
  CHECK_THAT(seed->LogTail(), Catch::Contains("gRPC over TCP is mutual TLS") &&
                                  !Catch::Contains("no credentials configured"));

  // Both hosts everywhere, and a process enrolled on the second is
  // replicated to the seed.
  REQUIRE(WaitUntil([&] { return CountMatches(*seed, "kind=host") == 2; }, 20s));
  REQUIRE(WaitUntil([&] { return CountMatches(*second, "kind=host") == 2; }, 20s));
  auto second_stub = NewRawStub(second->address());
  EnrollAttempt enrolled = RawEnroll(*second_stub, MakeRegister("replicated-over-tls"));
  REQUIRE(enrolled.status.ok());
  const Gid process = enrolled.enrollment->gid();
  CHECK(process.host() == Gid::Host(2));
  auto seed_stub = NewRawStub(seed->address());
  CHECK(WaitUntil([&] { return RawLookup(*seed_stub, process.raw()).ok(); }, 20s));

  // A spawn asked of the seed for the second host is forwarded over TLS.
  pb::SpawnProcessRequest request;
  request.set_executable(kChild);
  for (const char* arg : {"--say", "forwarded", "--then", "wait"}) request.add_args(arg);
  request.set_host(Gid::Host(2).raw());
  grpc::ClientContext spawn_context;
  spawn_context.set_deadline(std::chrono::system_clock::now() + 20s);
  pb::SpawnProcessResponse spawned;
  grpc::Status status = seed_stub->SpawnProcess(&spawn_context, request, &spawned);
  INFO(Describe(status));
  REQUIRE(status.ok());
  const Gid child = Gid::FromRaw(spawned.gid());
  CHECK(child.host() == Gid::Host(2));
  grpc::ClientContext kill_context;
  kill_context.set_deadline(std::chrono::system_clock::now() + 10s);
  pb::KillRequest kill;
  kill.set_gid(child.raw());
  kill.set_signal(SIGKILL);
  pb::KillResponse killed;
  status = seed_stub->Kill(&kill_context, kill, &killed);
  INFO(Describe(status));
  CHECK(status.ok());
  CHECK(WaitUntil(
      [&] {
        pb::Entity entity;
        return RawLookup(*second_stub, child.raw(), &entity).ok() && entity.state() == pb::EXITED;
      },
      10s));
}

TEST_CASE("a daemon with another cluster's credentials, or none, cannot join",
          "[integration][security][cluster]") {
  ClusterCredentials cluster({"seed"});
  ClusterCredentials other({"outsider"});
  DaemonOptions seed_options = LoopbackClusterMember("seed", WithCredentials(cluster.Host("seed")));
  seed_options.seed = true;
  auto seed = StartDaemon(seed_options);
  const std::string seed_address = REQUIRE_VALUE(seed->tcp_address());

  DaemonOptions outsider_options = LoopbackClusterMember(
      "outsider", WithCredentials(other.Host("outsider"), {"--join-timeout", "1"}));
  outsider_options.join = {seed_address};
  Daemon outsider(outsider_options);
  Status started = outsider.Start();
  REQUIRE_FALSE(started.ok());
  CHECK_THAT(started.message(), Catch::Contains("exited during start-up") &&
                                    Catch::Contains("no seed answered within 1.0 s") &&
                                    Catch::Contains("The TLS handshake failed") &&
                                    Catch::Contains("same `tocl keygen`"));

  DaemonOptions plain_options = LoopbackClusterMember("plain", {"--join-timeout", "1"});
  plain_options.join = {seed_address};
  Daemon plain(plain_options);
  started = plain.Start();
  REQUIRE_FALSE(started.ok());
  CHECK_THAT(started.message(), Catch::Contains("The TLS handshake failed"));
  // gRPC tells the seed's log why it closed the plaintext connection.
  CHECK_THAT(seed->LogTail(20'000), Catch::Contains("Handshake failed"));

  // Neither got in.
  CHECK(seed->running());
  CHECK(CountMatches(*seed, "kind=host") == 1);
}

TEST_CASE("a client over TCP needs this cluster's credentials, the unix socket none",
          "[integration][security]") {
  ClusterCredentials cluster({"daemon", "tool"});
  ClusterCredentials other({"tool"});
  ClearCredentialsEnvironment();
  DaemonOptions options = LoopbackClusterMember("daemon", WithCredentials(cluster.Host("daemon")));
  auto daemon = StartDaemon(options);
  const std::string tcp = REQUIRE_VALUE(daemon->tcp_address());

  // With the cluster's credentials: TLS, and trusted with kill (a process
  // that does not exist is NotFound, not PermissionDenied).
  auto client = REQUIRE_VALUE(DirectoryClient::Connect(
      {.address = tcp, .timeout = 10s, .credentials_dir = cluster.Host("tool")}));
  CHECK_OK(client->Ping());
  Status kill = client->Kill(Gid::Process(1, 999), SIGTERM);
  CHECK(kill.code() == StatusCode::kNotFound);

  // Without, or with another cluster's: refused at once, saying why.
  auto started = Clock::now();
  auto plain = DirectoryClient::Connect({.address = tcp, .timeout = 20s});
  REQUIRE_FALSE(plain.ok());
  CHECK(plain.status().code() == StatusCode::kUnavailable);
  CHECK_THAT(plain.status().message(), Catch::StartsWith("cannot reach the daemon at " + tcp) &&
                                           Catch::Contains("TLS handshake") &&
                                           Catch::Contains("$TOCL_CREDENTIALS"));
  CHECK(Clock::now() - started < 10s);
  started = Clock::now();
  auto foreign = DirectoryClient::Connect(
      {.address = tcp, .timeout = 20s, .credentials_dir = other.Host("tool")});
  REQUIRE_FALSE(foreign.ok());
  CHECK_THAT(foreign.status().message(), Catch::Contains("over TLS (" + other.Host("tool") + ")") &&
                                             Catch::Contains("TLS handshake") &&
                                             Catch::Contains("same cluster"));
  CHECK(Clock::now() - started < 10s);

  // Credentials that cannot be loaded are an error naming the file.
  auto missing = DirectoryClient::Connect(
      {.address = tcp, .timeout = 1s, .credentials_dir = cluster.Host("nobody")});
  CHECK(missing.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(missing.status().message(),
             Catch::Contains(cluster.Host("nobody") + "/") && Catch::Contains("is missing"));

  // The unix socket takes no TLS, and a credentials directory is not used
  // for it.
  auto local = REQUIRE_VALUE(DirectoryClient::Connect(daemon->address()));
  CHECK_OK(local->Ping());
  auto local_with = REQUIRE_VALUE(DirectoryClient::Connect(
      {.address = daemon->address(), .credentials_dir = cluster.Host("nobody")}));
  CHECK_OK(local_with->Ping());

  // The tocl command line, with --credentials, $TOCL_CREDENTIALS or none.
  const std::string cli = CliPath();
  Result<ProgramResult> run =
      RunProgram({cli, "hosts", "--daemon", tcp, "--credentials", cluster.Host("tool")});
  REQUIRE(run.ok());
  CHECK(run->exit_code == 0);
  CHECK_THAT(run->output, Catch::Contains("h1") && Catch::Contains("daemon"));
  run = RunProgram({cli, "hosts", "--daemon", tcp}, 30s,
                   {"TOCL_CREDENTIALS=" + cluster.Host("tool")});
  REQUIRE(run.ok());
  CHECK(run->exit_code == 0);
  run = RunProgram({cli, "hosts", "--daemon", tcp});
  REQUIRE(run.ok());
  CHECK(run->exit_code == 2);
  CHECK_THAT(run->output, Catch::StartsWith("tocl: cannot reach the daemon at " + tcp) &&
                              Catch::Contains("--credentials DIR"));
  run = RunProgram({cli, "ps", "--daemon", tcp, "--credentials", other.Host("tool")});
  REQUIRE(run.ok());
  CHECK(run->exit_code == 2);
  // One line: gRPC's own log line about the handshake is not printed.
  CHECK_THAT(run->output,
             Catch::StartsWith("tocl: cannot reach the daemon at " + tcp + " over TLS"));
  CHECK(std::count(run->output.begin(), run->output.end(), '\n') == 1);
  run = RunProgram({cli, "ps", "--daemon", tcp, "--credentials", cluster.Host("nobody")});
  REQUIRE(run.ok());
  CHECK(run->exit_code == 2);
  CHECK_THAT(run->output, Catch::Contains("is missing"));
  run = RunProgram({cli, "hosts", "--daemon", daemon->address()});
  REQUIRE(run.ok());
  CHECK(run->exit_code == 0);
}

TEST_CASE("a plaintext gRPC call to a TLS port gets UNAVAILABLE and the daemon stays up",
          "[integration][security]") {
  ClusterCredentials cluster({"daemon"});
  auto daemon =
      StartDaemon(LoopbackClusterMember("daemon", WithCredentials(cluster.Host("daemon"))));
  auto raw = NewRawStub(REQUIRE_VALUE(daemon->tcp_address()));
  for (int i = 0; i < 3; ++i) {
    grpc::Status status = RawPing(*raw);
    INFO(Describe(status));
    CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
  }
  pb::Entity host;
  CHECK(RawLookup(*raw, Gid::Host(1).raw(), &host).error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(daemon->running());
  auto local = NewRawStub(daemon->address());
  CHECK(RawPing(*local).ok());
}

TEST_CASE("a process gets the data-plane secret from a daemon with credentials, none without",
          "[integration][security]") {
  ClusterCredentials cluster({"daemon"});
  DaemonOptions options;
  options.extra_args = WithCredentials(cluster.Host("daemon"));
  auto with = StartDaemon(options);
  auto client = REQUIRE_VALUE(with->Connect());
  auto session = REQUIRE_VALUE(client->Enroll(ProcessNamed("secret-holder")));
  CHECK(session->data_plane_secret().size() == 32);
  CHECK(session->data_plane_secret() == cluster.SecretBytes());
  // A resumed session keeps it.
  REQUIRE(with->Stop().value_or(-1) == 0);
  REQUIRE_OK(with->Start());
  REQUIRE(WaitUntil([&] { return session->reenroll_count() > 0; }, 20s));
  CHECK(session->data_plane_secret() == cluster.SecretBytes());

  auto without = StartDaemon(DaemonOptions{});
  auto plain_client = REQUIRE_VALUE(without->Connect());
  auto plain_session = REQUIRE_VALUE(plain_client->Enroll(ProcessNamed("no-secret")));
  CHECK(plain_session->data_plane_secret().empty());
  CHECK_THAT(without->LogTail(),
             Catch::Contains("no credentials configured (--credentials): gRPC listens on loopback "
                             "only and processes' networks stay on loopback"));
}

TEST_CASE("without credentials a non-loopback address is refused, with them it is taken",
          "[integration][security]") {
  ClearCredentialsEnvironment();
  TempDir state("toclsd-state-");
  auto run = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {ToclsdPath(), "--state-dir", state.path(), "--host-name",
                                     "lonely"};
    argv.insert(argv.end(), args.begin(), args.end());
    Result<ProgramResult> result = RunProgram(argv, 30s);
    REQUIRE(result.ok());
    return *result;
  };
  ProgramResult wildcard = run({"--listen", "0.0.0.0:0"});
  CHECK(wildcard.exit_code == 2);
  CHECK_THAT(wildcard.output,
             Catch::StartsWith("toclsd: listen 0.0.0.0:0 is not a loopback address") &&
                 Catch::Contains("tocl keygen") && Catch::Contains("--credentials DIR"));
  ProgramResult other_host = run({"--listen", "127.0.0.1:0", "--join", "192.0.2.1:7390"});
  CHECK(other_host.exit_code == 2);
  CHECK_THAT(other_host.output, Catch::Contains("join 192.0.2.1:7390 is not a loopback address"));
  ProgramResult advertised = run({"--listen", "127.0.0.1:0", "--seed", "--advertise", "[::]:1"});
  CHECK(advertised.exit_code == 2);
  CHECK_THAT(advertised.output, Catch::Contains("advertise [::]:1 is not a loopback address"));

  // Credentials that are not there stop the daemon, naming the file.
  ProgramResult missing = run({"--listen", "none", "--credentials", state.File("nowhere")});
  CHECK(missing.exit_code == 1);
  CHECK_THAT(missing.output, Catch::Contains("credentials: " + state.File("nowhere") + "/") &&
                                 Catch::Contains("is missing"));

  // With credentials the wildcard is taken (and reached over loopback).
  ClusterCredentials cluster({"daemon", "tool"});
  DaemonOptions options;
  options.listen = "0.0.0.0:0";
  options.extra_args = WithCredentials(cluster.Host("daemon"));
  auto daemon = StartDaemon(options);
  const std::string bound = REQUIRE_VALUE(daemon->tcp_address());
  const std::string port = bound.substr(bound.rfind(':') + 1);
  auto client = REQUIRE_VALUE(DirectoryClient::Connect(
      {.address = "127.0.0.1:" + port, .timeout = 10s, .credentials_dir = cluster.Host("tool")}));
  CHECK_OK(client->Ping());
}

}  // namespace
}  // namespace tocl::testing
