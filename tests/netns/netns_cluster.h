// A small cluster of hosts in network namespaces, made by the test itself:
// each host a namespace with its own toclsd, joined by separate networks
// (one subnet each), optionally rate-limited with tc.
//
//   if (auto why = NetnsCluster::Unsupported()) { WARN("skipped: " << *why); return; }
//   auto cluster = REQUIRE_VALUE(NetnsCluster::Create({.hosts = 2}));
//   auto receiver = cluster->Spawn(2, {"/path/to/prog", "--recv"});   // runs in host 2
//   std::string out = REQUIRE_VALUE(cluster->Exec(1, {"/path/to/prog", "--send"}));
//   REQUIRE_OK(cluster->SetLink(1, 0, false));                        // host 1 loses network 0
//
// Layout (host h = 1..N, network m = 0..M-1):
//
//   namespace <prefix>-h<h>:  eth<m> = 10.77.<m+1>.<h>/24   (lo up)
//                             toclsd --host-id h --listen 10.77.1.<h>:7390
//                                    --networks tcp:eth0,...,tcp:eth<M-1>,shm
//                                    --credentials CredentialsDir(h)
//                                    host 1: --seed; others: --join 10.77.1.1:7390
//                                    (standalone daemons when options.cluster
//                                    is false)
//   namespace <prefix>-sw:    bridge br<m> per network, with port h<h>n<m>,
//                             the other end of host h's eth<m> (a veth pair)
//
// The daemons listen on non-loopback addresses, so they have cluster
// credentials (gRPC over mutual TLS, the data-plane secret for their
// processes): one CA for the cluster, made with GenerateCredentials in a
// temporary directory, a directory per host ("netns-h<h>", the daemon's
// host name); what runs in a host gets TOCL_CREDENTIALS for that host.
//
// A rate limit is a tbf qdisc on the egress of every host's eth<m>, so both
// directions of the network are limited. (The netem qdisc is not used: some
// kernels, this machine's among them, do not have it, so there is no delay
// option.)
//
// <prefix> is "tocl-nc<pid>-<k>": the test's pid and a per-process counter,
// so tests can run in parallel and twice in a row. The destructor kills
// every process left in the namespaces (toclsd, children the test spawned),
// deletes the namespaces (and with them the links) and removes the
// temporary directories, also after a failed test. Namespaces left by a
// killed test run (their owner pid no longer runs) are deleted by the next
// Create. All traffic stays inside these namespaces: nothing is configured in
// the root namespace, and daemons and processes get only the cluster's
// interfaces. Every wait is a poll with a deadline.
//
// Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN), iproute2 (`ip`, `tc`), veth
// and bridge support; Unsupported() says what is missing so that tests can
// skip. No Catch2 here (tocl-bench links it).
//
// Threading: one owner thread (the children it starts die with that thread,
// see ChildProcess). Accessors are const and may be called from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "child_process.h"
#include "temp_dir.h"
#include "test_daemon.h"
#include "tocl/status.h"

namespace tocl::testing {

struct NetnsLinkSpec {
  // "" = unlimited, else a tc rate: a number with bit, kbit, mbit or gbit
  // ("500mbit").
  std::string rate = {};
};

struct NetnsClusterOptions {
  int hosts = 2;                           // 2..8
  std::vector<NetnsLinkSpec> networks{2};  // one entry per network (subnet), 1..4
  std::string toclsd_path = {};            // empty: the build's toclsd
  bool start_daemons = true;
  std::string daemon_log_level = "info";
  // How long each daemon has to answer after it starts.
  std::chrono::milliseconds daemon_ready_timeout = std::chrono::seconds(15);
  // The daemons form one cluster: host 1 is the seed (--seed), the others
  // join it (--join, asking for their host number as id), one after the
  // other so ids are predictable. False: standalone daemons with --host-id.
  bool cluster = true;
  // Added to every daemon's command line, e.g. {"--down-after", "1"}.
  std::vector<std::string> daemon_args = {};
};

// Environment entries for Spawn: (name, value).
using EnvList = std::vector<std::pair<std::string, std::string>>;

class NetnsCluster {
 public:
  // The port every host's toclsd listens on (each on its own address).
  static constexpr int kDaemonPort = 7390;

  // Why network namespaces cannot be used here (not root, `ip netns`
  // refused, no veth or bridge, no tc), or nullopt. Probes once per process
  // by making and deleting a namespace.
  static std::optional<std::string> Unsupported();

  // Builds the namespaces, links and qdiscs and starts the daemons (when
  // asked). InvalidArgument for bad options; FailedPrecondition with the
  // reason when namespaces cannot be used; otherwise the error names the
  // command that failed and what it printed. Nothing is left behind on
  // failure.
  static Result<std::unique_ptr<NetnsCluster>> Create(NetnsClusterOptions options);

  ~NetnsCluster();
  NetnsCluster(const NetnsCluster&) = delete;
  NetnsCluster& operator=(const NetnsCluster&) = delete;

  // Hosts are numbered 1..hosts(), networks 0..networks()-1. An index out of
  // range is a bug in the test: the accessors abort with a message.
  int hosts() const { return static_cast<int>(hosts_.size()); }
  int networks() const { return static_cast<int>(options_.networks.size()); }

  std::string Namespace(int host) const;
  std::string SwitchNamespace() const;
  // The device inside the host's namespace: "eth<network>".
  std::string Interface(int host, int network) const;
  // IPv4 address without prefix ("10.77.1.2"), and with it ("10.77.1.2/24").
  std::string Address(int host, int network) const;
  std::string Cidr(int host, int network) const;
  // "ADDR:PORT" of the host's toclsd gRPC listener (on network 0).
  std::string DaemonAddress(int host) const;
  // "unix:PATH" of the host's toclsd socket (reachable from any namespace;
  // a path that does not exist when the daemons were not started).
  std::string DaemonSocket(int host) const;
  // "1=ADDR:PORT,2=ADDR:PORT,...": every host's daemon (TOCL_PEER_DAEMONS).
  std::string PeerDaemons() const;
  // The host's credentials directory (its daemon's --credentials, and
  // TOCL_CREDENTIALS of what runs in the host), made also when the daemons
  // are not started.
  std::string CredentialsDir(int host) const;
  // "tcp:eth0,tcp:eth1,shm": the networks the host's processes open.
  std::string DefaultNetworks(int host) const;
  // The host's daemon (to stop, kill or restart it, read its log).
  Daemon& HostDaemon(int host);

  // `ip link set dev eth<network> down|up` in the host's namespace. Up
  // returns once the device is up again (the peer's bridge port is never
  // touched).
  Status SetLink(int host, int network, bool up);
  // Changes a network's rate limit now, on every host ("" removes it).
  Status Shape(int network, const NetnsLinkSpec& spec);
  const NetnsLinkSpec& Link(int network) const;

  // `ip netns exec <namespace> argv...`: the command line that runs argv in
  // the host's namespace (argv[0] is looked up in $PATH there).
  std::vector<std::string> InNamespace(int host, std::vector<std::string> argv) const;
  // Starts argv in the host's namespace with TOCL_DAEMON=DaemonSocket(host),
  // TOCL_NETWORKS=DefaultNetworks(host), TOCL_CREDENTIALS=CredentialsDir(host)
  // and, for standalone daemons only, TOCL_PEER_DAEMONS=PeerDaemons();
  // `env` replaces those and adds others, options.env comes last. The
  // cluster's destructor kills whatever still runs in its namespaces.
  Result<ChildProcess> Spawn(int host, std::vector<std::string> argv, const EnvList& env = {},
                             SpawnOptions options = {});
  // Runs argv in the host's namespace (environment as Spawn) to completion:
  // its output (stdout and stderr). An error when it cannot start, exits
  // non-zero (the message holds its exit status and output) or runs longer
  // than `timeout` (it is killed).
  Result<std::string> Exec(int host, std::vector<std::string> argv,
                           std::chrono::milliseconds timeout = std::chrono::seconds(30),
                           const EnvList& env = {});

  // One line per host: namespace, addresses, daemon; for logs.
  std::string Describe() const;

 private:
  struct Host {
    std::string ns;
    std::unique_ptr<Daemon> daemon = nullptr;  // null when daemons are not started
  };

  NetnsCluster(NetnsClusterOptions options, std::string prefix, std::string ip, std::string tc);
  Status Build();
  Status MakeCredentials();
  Status StartDaemons();
  Status ApplyShape(int host, int network, const NetnsLinkSpec& spec);
  Status WaitForLink(int host, int network, bool up);
  // Runs an `ip`/`tc` command; the error names the command and its output.
  Result<std::string> Run(const std::vector<std::string>& argv) const;
  std::vector<std::string> Environment(int host, const EnvList& env) const;
  void CheckHost(int host) const;
  void CheckNetwork(int network) const;
  void TearDown();

  NetnsClusterOptions options_;
  const std::string prefix_;
  const std::string ip_;  // path of `ip`
  const std::string tc_;  // path of `tc`
  std::string switch_ns_;
  std::vector<Host> hosts_;             // hosts_[h - 1]
  std::vector<std::string> created_;    // namespaces made so far (deleted in reverse)
  std::optional<TempDir> credentials_;  // <dir>/cluster/{ca,netns-h1,...}
};

// Parses a tc rate ("500mbit", "1gbit", "64kbit", "1000000bit") into bits
// per second; InvalidArgument otherwise.
Result<uint64_t> ParseTcRate(const std::string& rate);

}  // namespace tocl::testing
