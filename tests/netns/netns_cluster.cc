#include "netns_cluster.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string_view>

#include "failure_check.h"
#include "security/keygen.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;

constexpr int kMinHosts = 2;
constexpr int kMaxHosts = 8;
constexpr int kMaxNetworks = 4;
// Every namespace of a cluster is named "tocl-nc<pid>-...", so that a later
// run can tell whether its owner still runs.
constexpr std::string_view kNamePrefix = "tocl-nc";
constexpr milliseconds kCommandTimeout = std::chrono::seconds(20);
constexpr milliseconds kLinkTimeout = std::chrono::seconds(10);

// Clusters made by this process so far: the second part of their names.
std::atomic<int> g_clusters{0};

std::string CommandText(const std::vector<std::string>& argv) {
  return fmt::format("{}", fmt::join(argv, " "));
}

std::string Trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// Runs a command to completion; an error names the command and holds what
// it printed.
Result<std::string> RunCommand(const std::vector<std::string>& argv,
                               milliseconds timeout = kCommandTimeout,
                               const std::vector<std::string>& env = {}) {
  TOCL_ASSIGN_OR_RETURN(ProgramResult result, RunProgram(argv, timeout, env));
  if (result.timed_out) {
    return DeadlineExceeded(fmt::format("`{}` did not finish within {} ms: {}", CommandText(argv),
                                        timeout.count(), Trimmed(result.output)));
  }
  if (result.exit_code != 0) {
    return Internal(fmt::format("`{}` failed ({}): {}", CommandText(argv),
                                ExitStatusText(result.exit_code), Trimmed(result.output)));
  }
  return result.output;
}

// The pid in a namespace name "tocl-nc<pid>-...", or nullopt when the name
// is not one of ours.
std::optional<pid_t> OwnerPid(std::string_view name) {
  if (name.substr(0, kNamePrefix.size()) != kNamePrefix) return std::nullopt;
  name.remove_prefix(kNamePrefix.size());
  pid_t pid = 0;
  auto [end, error] = std::from_chars(name.data(), name.data() + name.size(), pid);
  if (error != std::errc() || pid <= 0 || end == name.data() + name.size() || *end != '-') {
    return std::nullopt;
  }
  return pid;
}

// The namespaces `ip netns list` shows ("NAME" or "NAME (id: N)" per line).
std::vector<std::string> ListNamespaces(const std::string& ip) {
  std::vector<std::string> names;
  Result<std::string> listed = RunCommand({ip, "netns", "list"});
  if (!listed.ok()) return names;
  std::istringstream lines(*listed);
  std::string line;
  while (std::getline(lines, line)) {
    std::string name = line.substr(0, line.find(' '));
    if (!name.empty()) names.push_back(std::move(name));
  }
  return names;
}

// Kills every process in a namespace (`ip netns pids`).
void KillProcessesIn(const std::string& ip, const std::string& ns) {
  Result<std::string> pids = RunCommand({ip, "netns", "pids", ns});
  if (!pids.ok()) return;
  std::istringstream lines(*pids);
  pid_t pid = 0;
  while (lines >> pid) {
    if (pid > 1 && pid != ::getpid()) ::kill(pid, SIGKILL);
  }
}

void DeleteNamespace(const std::string& ip, const std::string& ns) {
  KillProcessesIn(ip, ns);
  Result<std::string> deleted = RunCommand({ip, "netns", "del", ns});
  if (!deleted.ok()) {
    std::fprintf(stderr, "netns cluster: cannot delete namespace %s: %s\n", ns.c_str(),
                 deleted.status().message().c_str());
  }
}

// Namespaces whose owner no longer runs: left by a test run that was killed.
void RemoveStaleNamespaces(const std::string& ip) {
  for (const std::string& name : ListNamespaces(ip)) {
    std::optional<pid_t> owner = OwnerPid(name);
    if (!owner || *owner == ::getpid()) continue;
    if (::kill(*owner, 0) == 0 || errno != ESRCH) continue;
    std::fprintf(stderr, "netns cluster: removing namespace %s left by pid %d\n", name.c_str(),
                 static_cast<int>(*owner));
    DeleteNamespace(ip, name);
  }
}

// Makes a namespace with a veth pair, a bridge and a tbf qdisc, runs a
// command in it, and deletes it: the first step that fails says why
// namespaces cannot be used.
std::optional<std::string> ProbeNamespaces() {
  Result<std::string> ip = FindProgram("ip");
  if (!ip.ok()) return "iproute2 is missing: " + ip.status().message();
  Result<std::string> tc = FindProgram("tc");
  if (!tc.ok()) return "iproute2 is missing: " + tc.status().message();
  const std::string ns = fmt::format("{}{}-probe", kNamePrefix, ::getpid());
  const std::vector<std::vector<std::string>> steps = {
      {*ip, "netns", "add", ns},
      {*ip, "-n", ns, "link", "add", "name", "p0", "type", "veth", "peer", "name", "p1"},
      {*ip, "-n", ns, "link", "add", "name", "pbr0", "type", "bridge"},
      {*ip, "-n", ns, "link", "set", "p1", "master", "pbr0"},
      {*tc, "-n", ns, "qdisc", "add", "dev", "p0", "root", "tbf", "rate", "100mbit", "burst",
       "64kb", "latency", "50ms"},
      {*ip, "netns", "exec", ns, *ip, "link", "show", "dev", "p0"},
  };
  std::optional<std::string> reason;
  for (size_t i = 0; i < steps.size() && !reason; ++i) {
    Result<std::string> done = RunCommand(steps[i]);
    if (done.ok()) continue;
    reason = fmt::format("network namespaces are not usable here{}: {}",
                         ::geteuid() == 0 ? "" : " (not root: they need CAP_SYS_ADMIN)",
                         done.status().message());
    if (i == 0) return reason;  // nothing to delete
  }
  DeleteNamespace(*ip, ns);
  return reason;
}

void AddEnv(std::vector<std::string>& env, std::string_view name, std::string_view value) {
  std::string entry = fmt::format("{}={}", name, value);
  for (std::string& existing : env) {
    if (existing.compare(0, name.size() + 1, entry, 0, name.size() + 1) == 0) {
      existing = std::move(entry);
      return;
    }
  }
  env.push_back(std::move(entry));
}

}  // namespace

Result<uint64_t> ParseTcRate(const std::string& rate) {
  uint64_t number = 0;
  auto [end, error] = std::from_chars(rate.data(), rate.data() + rate.size(), number);
  const std::string_view unit(end, static_cast<size_t>(rate.data() + rate.size() - end));
  uint64_t scale = 0;
  if (unit == "bit") scale = 1;
  if (unit == "kbit") scale = 1'000;
  if (unit == "mbit") scale = 1'000'000;
  if (unit == "gbit") scale = 1'000'000'000;
  if (error != std::errc() || number == 0 || scale == 0 || number > (uint64_t{1} << 40) / scale) {
    return InvalidArgument(fmt::format(
        "rate '{}' is not a positive number of bit, kbit, mbit or gbit (e.g. 500mbit)", rate));
  }
  return number * scale;
}

std::optional<std::string> NetnsCluster::Unsupported() {
  static const std::optional<std::string> reason = ProbeNamespaces();
  return reason;
}

Result<std::unique_ptr<NetnsCluster>> NetnsCluster::Create(NetnsClusterOptions options) {
  if (options.hosts < kMinHosts || options.hosts > kMaxHosts) {
    return InvalidArgument(
        fmt::format("{} hosts: a netns cluster has {} to {}", options.hosts, kMinHosts, kMaxHosts));
  }
  if (options.networks.empty() || options.networks.size() > kMaxNetworks) {
    return InvalidArgument(fmt::format("{} networks: a netns cluster has 1 to {}",
                                       options.networks.size(), kMaxNetworks));
  }
  for (const NetnsLinkSpec& link : options.networks) {
    if (!link.rate.empty()) TOCL_RETURN_IF_ERROR(ParseTcRate(link.rate).status());
  }
  if (std::optional<std::string> why = Unsupported()) return FailedPrecondition(*why);
  TOCL_ASSIGN_OR_RETURN(std::string ip, FindProgram("ip"));
  TOCL_ASSIGN_OR_RETURN(std::string tc, FindProgram("tc"));
  RemoveStaleNamespaces(ip);

  std::string prefix = fmt::format("{}{}-{}", kNamePrefix, ::getpid(), g_clusters++);
  std::unique_ptr<NetnsCluster> cluster(
      new NetnsCluster(std::move(options), std::move(prefix), std::move(ip), std::move(tc)));
  // On an error the destructor takes down whatever was made.
  TOCL_RETURN_IF_ERROR(cluster->Build().WithContext("building the netns cluster"));
  TOCL_RETURN_IF_ERROR(
      cluster->MakeCredentials().WithContext("making the netns cluster's credentials"));
  if (cluster->options_.start_daemons) {
    TOCL_RETURN_IF_ERROR(
        cluster->StartDaemons().WithContext("starting the netns cluster's daemons"));
  }
  return cluster;
}

NetnsCluster::NetnsCluster(NetnsClusterOptions options, std::string prefix, std::string ip,
                           std::string tc)
    : options_(std::move(options)),
      prefix_(std::move(prefix)),
      ip_(std::move(ip)),
      tc_(std::move(tc)) {
  switch_ns_ = prefix_ + "-sw";
  for (int h = 1; h <= options_.hosts; ++h) hosts_.push_back({fmt::format("{}-h{}", prefix_, h)});
}

NetnsCluster::~NetnsCluster() {
  TearDown();
}

void NetnsCluster::TearDown() {
  if (CurrentTestFailed()) {
    std::fprintf(stderr, "---- netns cluster ----\n%s---- end of netns cluster ----\n",
                 Describe().c_str());
  }
  for (Host& host : hosts_) host.daemon.reset();  // kills toclsd; prints its log on failure
  for (auto ns = created_.rbegin(); ns != created_.rend(); ++ns) DeleteNamespace(ip_, *ns);
  created_.clear();
}

Status NetnsCluster::Build() {
  TOCL_RETURN_IF_ERROR(Run({ip_, "netns", "add", switch_ns_}).status());
  created_.push_back(switch_ns_);
  for (const Host& host : hosts_) {
    TOCL_RETURN_IF_ERROR(Run({ip_, "netns", "add", host.ns}).status());
    created_.push_back(host.ns);
    TOCL_RETURN_IF_ERROR(Run({ip_, "-n", host.ns, "link", "set", "dev", "lo", "up"}).status());
  }
  for (int m = 0; m < networks(); ++m) {
    const std::string bridge = fmt::format("br{}", m);
    TOCL_RETURN_IF_ERROR(
        Run({ip_, "-n", switch_ns_, "link", "add", "name", bridge, "type", "bridge"}).status());
    TOCL_RETURN_IF_ERROR(Run({ip_, "-n", switch_ns_, "link", "set", "dev", bridge, "up"}).status());
    for (int h = 1; h <= hosts(); ++h) {
      const std::string port = fmt::format("h{}n{}", h, m);
      const std::string& ns = Namespace(h);
      const std::string device = Interface(h, m);
      TOCL_RETURN_IF_ERROR(Run({ip_, "-n", switch_ns_, "link", "add", "name", port, "type", "veth",
                                "peer", "name", device, "netns", ns})
                               .status());
      TOCL_RETURN_IF_ERROR(
          Run({ip_, "-n", switch_ns_, "link", "set", "dev", port, "master", bridge}).status());
      TOCL_RETURN_IF_ERROR(Run({ip_, "-n", switch_ns_, "link", "set", "dev", port, "up"}).status());
      TOCL_RETURN_IF_ERROR(Run({ip_, "-n", ns, "addr", "add", Cidr(h, m), "dev", device}).status());
      TOCL_RETURN_IF_ERROR(Run({ip_, "-n", ns, "link", "set", "dev", device, "up"}).status());
      TOCL_RETURN_IF_ERROR(ApplyShape(h, m, options_.networks[static_cast<size_t>(m)]));
    }
  }
  for (int h = 1; h <= hosts(); ++h) {
    for (int m = 0; m < networks(); ++m) TOCL_RETURN_IF_ERROR(WaitForLink(h, m, true));
  }
  return Status::Ok();
}

Status NetnsCluster::MakeCredentials() {
  TOCL_ASSIGN_OR_RETURN(TempDir dir, TempDir::Make("tocl-nc-credentials-"));
  credentials_.emplace(std::move(dir));
  security::KeygenOptions keygen;
  keygen.directory = credentials_->File("cluster");
  for (int h = 1; h <= hosts(); ++h) {
    keygen.hosts.push_back({fmt::format("netns-h{}", h), {Address(h, 0)}});
  }
  return security::GenerateCredentials(keygen).status();
}

std::string NetnsCluster::CredentialsDir(int host) const {
  CheckHost(host);
  return credentials_ ? credentials_->File(fmt::format("cluster/netns-h{}", host))
                      : "/nonexistent/tocl-netns-credentials";
}

Status NetnsCluster::StartDaemons() {
  for (int h = 1; h <= hosts(); ++h) {
    DaemonOptions daemon;
    daemon.toclsd_path = options_.toclsd_path;
    daemon.listen = DaemonAddress(h);
    daemon.host_name = fmt::format("netns-h{}", h);
    daemon.host_id = h;
    daemon.networks = DefaultNetworks(h);
    daemon.log_level = options_.daemon_log_level;
    daemon.command_prefix = {ip_, "netns", "exec", Namespace(h)};
    daemon.ready_timeout = options_.daemon_ready_timeout;
    if (options_.cluster) {
      daemon.extra_args = h == 1 ? std::vector<std::string>{"--seed"}
                                 : std::vector<std::string>{"--join", DaemonAddress(1)};
    }
    daemon.extra_args.insert(daemon.extra_args.end(), {"--credentials", CredentialsDir(h)});
    daemon.extra_args.insert(daemon.extra_args.end(), options_.daemon_args.begin(),
                             options_.daemon_args.end());
    Host& host = hosts_[static_cast<size_t>(h - 1)];
    host.daemon = std::make_unique<Daemon>(std::move(daemon));
    TOCL_RETURN_IF_ERROR(host.daemon->Start().WithContext(fmt::format("host {}", h)));
  }
  return Status::Ok();
}

Status NetnsCluster::ApplyShape(int host, int network, const NetnsLinkSpec& spec) {
  const std::string& ns = Namespace(host);
  const std::string device = Interface(host, network);
  if (spec.rate.empty()) {
    // Only a qdisc of ours is removed; deleting the default one is an error.
    TOCL_ASSIGN_OR_RETURN(std::string shown,
                          Run({tc_, "-n", ns, "qdisc", "show", "dev", device, "root"}));
    if (shown.find("tbf") == std::string::npos) return Status::Ok();
    return Run({tc_, "-n", ns, "qdisc", "del", "dev", device, "root"}).status();
  }
  TOCL_ASSIGN_OR_RETURN(uint64_t bits, ParseTcRate(spec.rate));
  // The bucket holds 4 ms at the rate, and at least one 64 KiB GSO packet
  // (veth hands tbf whole GSO packets; larger ones it would cut up).
  const uint64_t burst = std::max<uint64_t>(64 * 1024, bits / 8 / 250);
  return Run({tc_, "-n", ns, "qdisc", "replace", "dev", device, "root", "tbf", "rate", spec.rate,
              "burst", std::to_string(burst), "latency", "50ms"})
      .status();
}

Status NetnsCluster::WaitForLink(int host, int network, bool up) {
  const std::vector<std::string> show = {ip_,    "-n",   Namespace(host), "-o",
                                         "link", "show", "dev",           Interface(host, network)};
  Status last = Status::Ok();
  bool reached = WaitUntil(
      [&] {
        Result<std::string> shown = Run(show);
        if (!shown.ok()) {
          last = shown.status();
          return false;
        }
        return (shown->find("state UP") != std::string::npos) == up;
      },
      kLinkTimeout, milliseconds(20));
  if (reached) return Status::Ok();
  return DeadlineExceeded(fmt::format("{} in {} is not {} after {} ms{}", Interface(host, network),
                                      Namespace(host), up ? "up" : "down", kLinkTimeout.count(),
                                      last.ok() ? "" : " (" + last.message() + ")"));
}

Status NetnsCluster::SetLink(int host, int network, bool up) {
  CheckHost(host);
  CheckNetwork(network);
  TOCL_RETURN_IF_ERROR(Run({ip_, "-n", Namespace(host), "link", "set", "dev",
                            Interface(host, network), up ? "up" : "down"})
                           .status());
  return WaitForLink(host, network, up);
}

Status NetnsCluster::Shape(int network, const NetnsLinkSpec& spec) {
  CheckNetwork(network);
  if (!spec.rate.empty()) TOCL_RETURN_IF_ERROR(ParseTcRate(spec.rate).status());
  for (int h = 1; h <= hosts(); ++h) TOCL_RETURN_IF_ERROR(ApplyShape(h, network, spec));
  options_.networks[static_cast<size_t>(network)] = spec;
  return Status::Ok();
}

const NetnsLinkSpec& NetnsCluster::Link(int network) const {
  CheckNetwork(network);
  return options_.networks[static_cast<size_t>(network)];
}

std::string NetnsCluster::Namespace(int host) const {
  CheckHost(host);
  return hosts_[static_cast<size_t>(host - 1)].ns;
}

std::string NetnsCluster::SwitchNamespace() const {
  return switch_ns_;
}

std::string NetnsCluster::Interface(int host, int network) const {
  CheckHost(host);
  CheckNetwork(network);
  return fmt::format("eth{}", network);
}

std::string NetnsCluster::Address(int host, int network) const {
  CheckHost(host);
  CheckNetwork(network);
  return fmt::format("10.77.{}.{}", network + 1, host);
}

std::string NetnsCluster::Cidr(int host, int network) const {
  return Address(host, network) + "/24";
}

std::string NetnsCluster::DaemonAddress(int host) const {
  return fmt::format("{}:{}", Address(host, 0), kDaemonPort);
}

std::string NetnsCluster::DaemonSocket(int host) const {
  CheckHost(host);
  const Host& entry = hosts_[static_cast<size_t>(host - 1)];
  return entry.daemon ? entry.daemon->address() : "unix:/nonexistent/toclsd-not-started.sock";
}

std::string NetnsCluster::PeerDaemons() const {
  std::vector<std::string> peers;
  for (int h = 1; h <= hosts(); ++h) peers.push_back(fmt::format("{}={}", h, DaemonAddress(h)));
  return fmt::format("{}", fmt::join(peers, ","));
}

std::string NetnsCluster::DefaultNetworks(int host) const {
  std::vector<std::string> networks;
  for (int m = 0; m < this->networks(); ++m) networks.push_back("tcp:" + Interface(host, m));
  networks.push_back("shm");
  return fmt::format("{}", fmt::join(networks, ","));
}

Daemon& NetnsCluster::HostDaemon(int host) {
  CheckHost(host);
  Host& entry = hosts_[static_cast<size_t>(host - 1)];
  if (!entry.daemon) {
    std::fprintf(stderr, "NetnsCluster: host %d has no daemon (start_daemons is false)\n", host);
    std::abort();
  }
  return *entry.daemon;
}

std::vector<std::string> NetnsCluster::InNamespace(int host, std::vector<std::string> argv) const {
  std::vector<std::string> command = {ip_, "netns", "exec", Namespace(host)};
  command.insert(command.end(), std::make_move_iterator(argv.begin()),
                 std::make_move_iterator(argv.end()));
  return command;
}

std::vector<std::string> NetnsCluster::Environment(int host, const EnvList& env) const {
  std::vector<std::string> entries;
  AddEnv(entries, "TOCL_DAEMON", DaemonSocket(host));
  // Cluster daemons replicate each other's rows: processes look everything
  // up at their own daemon. Standalone ones are told about each other.
  if (!options_.cluster) AddEnv(entries, "TOCL_PEER_DAEMONS", PeerDaemons());
  AddEnv(entries, "TOCL_NETWORKS", DefaultNetworks(host));
  AddEnv(entries, "TOCL_CREDENTIALS", CredentialsDir(host));
  for (const auto& [name, value] : env) AddEnv(entries, name, value);
  return entries;
}

Result<ChildProcess> NetnsCluster::Spawn(int host, std::vector<std::string> argv,
                                         const EnvList& env, SpawnOptions options) {
  if (argv.empty()) return InvalidArgument("empty command line");
  std::vector<std::string> entries = Environment(host, env);
  for (const std::string& entry : options.env) {
    std::string_view text(entry);
    size_t equals = text.find('=');
    AddEnv(entries, text.substr(0, equals),
           equals == std::string_view::npos ? "" : text.substr(equals + 1));
  }
  options.env = std::move(entries);
  return ChildProcess::Spawn(InNamespace(host, std::move(argv)), options);
}

Result<std::string> NetnsCluster::Exec(int host, std::vector<std::string> argv,
                                       milliseconds timeout, const EnvList& env) {
  if (argv.empty()) return InvalidArgument("empty command line");
  return RunCommand(InNamespace(host, std::move(argv)), timeout, Environment(host, env));
}

Result<std::string> NetnsCluster::Run(const std::vector<std::string>& argv) const {
  return RunCommand(argv);
}

std::string NetnsCluster::Describe() const {
  std::string text;
  for (int h = 1; h <= hosts(); ++h) {
    std::vector<std::string> addresses;
    for (int m = 0; m < networks(); ++m) {
      addresses.push_back(fmt::format("{} {}{}", Interface(h, m), Cidr(h, m),
                                      Link(m).rate.empty() ? "" : " tbf " + Link(m).rate));
    }
    const Host& host = hosts_[static_cast<size_t>(h - 1)];
    text += fmt::format("host {}: ns {}, {}; toclsd {}\n", h, host.ns, fmt::join(addresses, ", "),
                        host.daemon
                            ? fmt::format("{} (pid {}, {})", DaemonAddress(h), host.daemon->pid(),
                                          host.daemon->running() ? "running" : "not running")
                            : "not started");
  }
  text += fmt::format("switch: ns {}, bridges br0..br{}\n", switch_ns_, networks() - 1);
  return text;
}

void NetnsCluster::CheckHost(int host) const {
  if (host >= 1 && host <= hosts()) return;
  std::fprintf(stderr, "NetnsCluster: host %d is outside 1..%d\n", host, hosts());
  std::abort();
}

void NetnsCluster::CheckNetwork(int network) const {
  if (network >= 0 && network < networks()) return;
  std::fprintf(stderr, "NetnsCluster: network %d is outside 0..%d\n", network, networks() - 1);
  std::abort();
}

}  // namespace tocl::testing
