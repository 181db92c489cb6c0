#include "soak_faults.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "soak_say.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// How often each kind is drawn, in kAllFaultKinds order.
constexpr double kWeights[] = {2, 2, 3, 2, 2};

// Lowest and highest duration of each kind, in ms. A worker-kill's
// duration is the time until its successor starts; a daemon-kill's, the
// time the host has no daemon (over --down-after, 3 s, its host is
// declared down by the others).
struct Range {
  int low;
  int high;
};
constexpr Range kDurations[] = {{0, 3000}, {200, 4000}, {1000, 6000}, {3000, 10000}, {3000, 10000}};

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
  }
  return "unknown";
}

std::string PlannedFault::Describe() const {
  const bool link =
      kind == FaultKind::kLinkDown || kind == FaultKind::kDelay || kind == FaultKind::kLoss;
  return fmt::format("#{} {} host {}{} for {:.1f} s", number, FaultKindName(kind), host,
                     link ? fmt::format(" eth{}", network) : "", duration.count() / 1000.0);
}

std::vector<PlannedFault> PlanFaults(uint64_t seed, milliseconds duration, int hosts, int networks,
                                     const FaultPolicy& policy) {
  std::mt19937_64 random(seed);
  auto between = [&](int low, int high) {
    return std::uniform_int_distribution<int>(low, high)(random);
  };
  std::discrete_distribution<size_t> pick_kind(std::begin(kWeights), std::end(kWeights));
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
    fault.network = between(0, networks - 1);
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
    : cluster_(cluster), workers_(workers), tc_(FindProgram("tc").value_or("tc")) {}

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
  }
  TOCL_RETURN_IF_ERROR(done.WithContext("fault " + fault.Describe()));
  active_.push_back({fault, Clock::now() + fault.duration});
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
  }
  SoakSay(fmt::format("fault #{} ends{}", fault.number, done.ok() ? "" : ": " + done.ToString()));
  return done.WithContext("ending fault " + fault.Describe());
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
