#include "soak_faults.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <random>

#include "soak_say.h"
#include "tocl/directory_client.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// How often each kind is drawn, in kAllFaultKinds order.
constexpr double kWeights[] = {2, 2, 3, 2, 2, 2};

// Lowest and highest duration of each kind, in ms. A worker-kill's
// duration is the time until its successor starts; a daemon-kill's, the
// time the host has no daemon (over --down-after, 3 s, its host is
// declared down by the others); a conn-kill's, the time between its two
// kills.
struct Range {
  int low;
  int high;
};
constexpr Range kDurations[] = {{0, 3000},     {200, 4000},   {1000, 6000},
                                {3000, 10000}, {3000, 10000}, {200, 2000}};
static_assert(std::size(kWeights) == std::size(kAllFaultKinds));
static_assert(std::size(kDurations) == std::size(kAllFaultKinds));

// Slack a host keeps after a planned fault's end (restarts take a moment).
constexpr milliseconds kPlanSlack{1000};

size_t KindIndex(FaultKind kind) {
  return static_cast<size_t>(kind);
}

}  // namespace

std::string FaultKindName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kWorkerKill:
      return "worker-kill";
    case FaultKind::kDaemonKill:
      return "daemon-kill";
    case FaultKind::kLinkDown:
      return "link-down";
    case FaultKind::kDelay:
      return "delay";
    case FaultKind::kLoss:
      return "loss";
    case FaultKind::kConnKill:
      return "conn-kill";
  }
  return "unknown";
}

Result<std::set<FaultKind>> ParseFaultKinds(std::string_view list) {
  std::set<FaultKind> kinds;
  std::string known;
  for (FaultKind kind : kAllFaultKinds) known += (known.empty() ? "" : ",") + FaultKindName(kind);
  while (!list.empty()) {
    const size_t comma = std::min(list.find(','), list.size());
    const std::string_view name = list.substr(0, comma);
    list.remove_prefix(std::min(comma + 1, list.size()));
    if (name.empty()) continue;
    auto kind = std::find_if(std::begin(kAllFaultKinds), std::end(kAllFaultKinds),
                             [&](FaultKind k) { return FaultKindName(k) == name; });
    if (kind == std::end(kAllFaultKinds)) {
      return InvalidArgument(fmt::format("no fault kind '{}' (there are {})", name, known));
    }
    kinds.insert(*kind);
  }
  if (kinds.empty()) return InvalidArgument("no fault kind named (there are " + known + ")");
  return kinds;
}

std::string PlannedFault::Describe() const {
  const bool link = kind == FaultKind::kLinkDown || kind == FaultKind::kDelay ||
                    kind == FaultKind::kLoss || kind == FaultKind::kConnKill;
  const std::string where =
      network == kAllNetworks ? " both networks" : fmt::format(" eth{}", network);
  return fmt::format("#{} {} host {}{} for {:.1f} s", number, FaultKindName(kind), host,
                     link ? where : "", duration.count() / 1000.0);
}

std::vector<PlannedFault> PlanFaults(uint64_t seed, milliseconds duration, int hosts, int networks,
                                     const FaultPolicy& policy) {
  std::mt19937_64 random(seed);
  auto between = [&](int low, int high) {
    return std::uniform_int_distribution<int>(low, high)(random);
  };
  if (policy.kinds.empty()) return {};
  std::vector<double> weights;
  for (size_t k = 0; k < std::size(kAllFaultKinds); ++k) {
    weights.push_back(policy.kinds.count(kAllFaultKinds[k]) > 0 ? kWeights[k] : 0);
  }
  std::discrete_distribution<size_t> pick_kind(weights.begin(), weights.end());
  std::vector<milliseconds> busy_until(static_cast<size_t>(hosts) + 1, milliseconds(0));
  std::vector<PlannedFault> plan;
  milliseconds at(between(500, 2000));
  while (at < duration) {
    std::vector<int> free_hosts;
    milliseconds first_free = milliseconds::max();
    for (int h = 1; h <= hosts; ++h) {
      const milliseconds until = busy_until[static_cast<size_t>(h)];
      if (until <= at) {
        free_hosts.push_back(h);
      } else {
        first_free = std::min(first_free, until);
      }
    }
    if (hosts - static_cast<int>(free_hosts.size()) >= policy.max_concurrent) {
      at = first_free;
      continue;
    }
    const FaultKind kind = kAllFaultKinds[pick_kind(random)];
    std::vector<int> candidates;
    for (int h : free_hosts) {
      if (kind == FaultKind::kWorkerKill && h == policy.long_lived_worker_host) continue;
      if (kind == FaultKind::kDaemonKill && h == policy.long_lived_daemon_host) continue;
      candidates.push_back(h);
    }
    if (candidates.empty()) {
      at += milliseconds(500);
      continue;
    }
    PlannedFault fault;
    fault.number = static_cast<int>(plan.size()) + 1;
    fault.start = at;
    fault.kind = kind;
    fault.host =
        candidates[static_cast<size_t>(between(0, static_cast<int>(candidates.size()) - 1))];
    // A conn-kill takes one network's connections, or both networks'.
    fault.network = between(kind == FaultKind::kConnKill ? kAllNetworks : 0, networks - 1);
    // Every fault is over by the end of the phase.
    const Range range = kDurations[KindIndex(kind)];
    const int left = static_cast<int>((duration - at).count());
    if (left < range.low) {
      at += milliseconds(500);
      continue;
    }
    fault.duration = milliseconds(between(range.low, std::min(range.high, left)));
    busy_until[static_cast<size_t>(fault.host)] = at + fault.duration + kPlanSlack;
    plan.push_back(fault);
    at += milliseconds(between(500, 2500));
  }
  return plan;
}

FaultInjector::FaultInjector(NetnsCluster& cluster, SoakWorkers& workers)
    : cluster_(cluster),
      workers_(workers),
      tc_(FindProgram("tc").value_or("tc")),
      ss_(FindProgram("ss").value_or("ss")) {}

FaultInjector::~FaultInjector() {
  if (Status ended = EndAll(); !ended.ok()) SoakSay("ending the faults: " + ended.ToString());
}

bool FaultInjector::HostFree(int host) const {
  return std::none_of(active_.begin(), active_.end(),
                      [&](const Active& active) { return active.fault.host == host; });
}

Clock::time_point FaultInjector::NextEnd() const {
  Clock::time_point next = Clock::time_point::max();
  for (const Active& active : active_) next = std::min(next, active.end);
  return next;
}

Status FaultInjector::Begin(const PlannedFault& fault) {
  if (!HostFree(fault.host)) {
    return FailedPrecondition(
        fmt::format("fault {}: host {} has an active fault", fault.Describe(), fault.host));
  }
  SoakSay("fault " + fault.Describe() + " begins");
  BegunFault begun{fault, Clock::now()};
  Status done;
  switch (fault.kind) {
    case FaultKind::kWorkerKill:
      done = workers_.Kill(fault.host);
      break;
    case FaultKind::kDaemonKill:
      done = cluster_.HostDaemon(fault.host).Kill();
      break;
    case FaultKind::kLinkDown:
      done = cluster_.SetLink(fault.host, fault.network, false);
      break;
    case FaultKind::kDelay:
      // A slow link with a deep queue: every packet waits its turn behind
      // up to 400 ms of others.
      done =
          Qdisc(fault.host, fault.network,
                {{"replace", "root", "tbf", "rate", "2mbit", "burst", "4kb", "latency", "400ms"}});
      break;
    case FaultKind::kLoss:
      // tbf alone drops only what overflows its queue; a 3-packet head-drop
      // fifo under it drops small packets (acks, short messages) too.
      done = Qdisc(fault.host, fault.network,
                   {{"replace", "root", "handle", "1:", "tbf", "rate", "20mbit", "burst", "10kb",
                     "limit", "100kb"},
                    {"add", "parent", "1:1", "pfifo_head_drop", "limit", "3"}});
      break;
    case FaultKind::kConnKill: {
      Result<int> killed = KillConnections(fault.host, fault.network);
      if (killed.ok()) {
        begun.sockets = *killed;
        SoakSay(fmt::format("fault #{}: {} sockets destroyed", fault.number, *killed));
      }
      done = killed.status();
      break;
    }
  }
  TOCL_RETURN_IF_ERROR(done.WithContext("fault " + fault.Describe()));
  active_.push_back({fault, Clock::now() + fault.duration, begun_.size()});
  begun_.push_back(begun);
  ++counts_[fault.kind];
  return Status::Ok();
}

Status FaultInjector::EndDue(Clock::time_point now) {
  while (!active_.empty()) {
    auto due = std::min_element(active_.begin(), active_.end(),
                                [](const Active& a, const Active& b) { return a.end < b.end; });
    if (due->end > now) return Status::Ok();
    const Active active = *due;
    active_.erase(due);
    TOCL_RETURN_IF_ERROR(End(active));
  }
  return Status::Ok();
}

Status FaultInjector::EndAll() {
  Status first;
  while (!active_.empty()) {
    const Active active = active_.front();
    active_.erase(active_.begin());
    Status ended = End(active);
    if (first.ok()) first = ended;
  }
  return first;
}

Status FaultInjector::End(const Active& active) {
  const PlannedFault& fault = active.fault;
  Status done;
  switch (fault.kind) {
    case FaultKind::kWorkerKill:
      done = workers_.Start(fault.host);
      break;
    case FaultKind::kDaemonKill:
      done = cluster_.HostDaemon(fault.host).Start();
      break;
    case FaultKind::kLinkDown:
      done = cluster_.SetLink(fault.host, fault.network, true);
      break;
    case FaultKind::kDelay:
    case FaultKind::kLoss:
      done = Qdisc(fault.host, fault.network, {{"del", "root"}});
      break;
    case FaultKind::kConnKill: {
      Result<int> killed = KillConnections(fault.host, fault.network);
      if (killed.ok()) {
        begun_[active.begun].sockets += *killed;
        SoakSay(fmt::format("fault #{}: {} more sockets destroyed", fault.number, *killed));
      }
      done = killed.status();
      break;
    }
  }
  SoakSay(fmt::format("fault #{} ends{}", fault.number, done.ok() ? "" : ": " + done.ToString()));
  return done.WithContext("ending fault " + fault.Describe());
}

Result<int> FaultInjector::KillConnections(int host, int network) {
  // Each worker's tcp listeners, by network, as it published them
  // ("IP:PORT/PREFIX"): a connection to a worker has its listener as the
  // destination on the connecting side and as the source on the accepting
  // side, which is how ss finds the connections between workers and
  // nothing else (the daemons' are to other ports).
  TOCL_ASSIGN_OR_RETURN(auto directory, DirectoryClient::Connect(cluster_.DaemonSocket(host)));
  auto listeners = [&](int h) {
    std::map<int, std::string> by_network;
    if (!workers_.Running(h)) return by_network;  // between a kill and its successor
    auto entity = directory->Lookup(workers_.Current(h).worker->gids().at(0).process());
    if (!entity.ok()) return by_network;  // a successor not replicated here yet
    for (const Endpoint& endpoint : entity->endpoints) {
      if (endpoint.subsystem.rfind("tcp", 0) != 0) continue;
      const std::string listener = endpoint.address.substr(0, endpoint.address.find('/'));
      for (int n = 0; n < cluster_.networks(); ++n) {
        if (listener.rfind(cluster_.Address(h, n) + ":", 0) == 0) by_network[n] = listener;
      }
    }
    return by_network;
  };
  std::string filter;
  auto add = [&](const char* direction, const std::string& address) {
    filter += fmt::format("{}{} {}", filter.empty() ? "( " : " or ", direction, address);
  };
  for (int h = 1; h <= cluster_.hosts(); ++h) {
    for (const auto& [n, listener] : listeners(h)) {
      if (network != kAllNetworks && n != network) continue;
      add(h == host ? "src" : "dst", listener);
    }
  }
  if (filter.empty()) return 0;
  filter += " )";
  const std::vector<std::string> argv =
      cluster_.InNamespace(host, {ss_, "-K", "-tnH", "state", "established", filter});
  TOCL_ASSIGN_OR_RETURN(ProgramResult result, RunProgram(argv, std::chrono::seconds(20)));
  if (result.exit_code != 0) {
    return Internal(fmt::format("`{}` failed ({}): {}", fmt::join(argv, " "),
                                ExitStatusText(result.exit_code), result.output));
  }
  // ss -K lists what it destroyed, a line each.
  return static_cast<int>(std::count(result.output.begin(), result.output.end(), '\n'));
}

Status FaultInjector::Qdisc(int host, int network,
                            const std::vector<std::vector<std::string>>& commands) {
  for (const std::vector<std::string>& command : commands) {
    // tc -n NS qdisc VERB dev ethM REST...
    std::vector<std::string> argv = {tc_,        "-n",  cluster_.Namespace(host),         "qdisc",
                                     command[0], "dev", cluster_.Interface(host, network)};
    argv.insert(argv.end(), command.begin() + 1, command.end());
    TOCL_ASSIGN_OR_RETURN(ProgramResult result, RunProgram(argv, std::chrono::seconds(20)));
    if (result.exit_code != 0) {
      return Internal(fmt::format("`{}` failed ({}): {}", fmt::join(argv, " "),
                                  ExitStatusText(result.exit_code), result.output));
    }
  }
  return Status::Ok();
}

}  // namespace tocl::testing
