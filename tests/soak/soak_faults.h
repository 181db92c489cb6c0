// The faults the soak injects into a netns cluster, and their schedule.
//
//   FaultPlan plan = PlanFaults(seed, std::chrono::seconds(60), cluster.hosts(), 2, {});
//   FaultInjector faults(cluster, workers);
//   for (const PlannedFault& fault : plan) { ...wait until fault.start... faults.Begin(fault); }
//   faults.EndDue(now); ... faults.EndAll();
//
// Kinds (each on one host; one fault per host at a time, at most
// `max_concurrent` at once, so a host never loses both networks):
//   worker-kill  SIGKILL the host's soak worker; its successor starts when the fault ends
//   daemon-kill  SIGKILL the host's toclsd; started again (same state) when it ends
//   link-down    `ip link set ethM down`, up when it ends
//   delay        tbf on ethM's egress: 2 Mbit/s, 400 ms of queue (netem is missing here)
//   loss         tbf 20 Mbit/s with a 3-packet head-drop fifo under it: drops under load
//   conn-kill    `ss -K` in the host: the tcp connections of its worker with the other
//                workers (on ethM or on both networks) are destroyed when the fault
//                begins and again when it ends (while they resend what the first lost)
// The schedule is drawn from the seed and the kinds in use alone
// (PlanFaults), so a failing run can be replayed with the same faults in
// the same order; how the system times its reactions still varies.
//
// Threading: one owner thread (the cluster's).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "netns_cluster.h"
#include "soak_workers.h"

namespace tocl::testing {

enum class FaultKind { kWorkerKill, kDaemonKill, kLinkDown, kDelay, kLoss, kConnKill };
inline constexpr FaultKind kAllFaultKinds[] = {FaultKind::kWorkerKill, FaultKind::kDaemonKill,
                                               FaultKind::kLinkDown,   FaultKind::kDelay,
                                               FaultKind::kLoss,       FaultKind::kConnKill};
std::string FaultKindName(FaultKind kind);  // "worker-kill", ...
// The kinds named in a comma list ("worker-kill,conn-kill"); InvalidArgument
// naming the kinds there are for anything else, or for none.
Result<std::set<FaultKind>> ParseFaultKinds(std::string_view list);

// Of a conn-kill: the connections on every network.
inline constexpr int kAllNetworks = -1;

struct PlannedFault {
  int number = 0;                   // 1, 2, ...
  std::chrono::milliseconds start;  // from the start of the fault phase
  FaultKind kind = FaultKind::kLinkDown;
  int host = 1;
  int network = 0;  // link faults and conn-kill (kAllNetworks: both) only
  std::chrono::milliseconds duration;

  std::string Describe() const;  // "#12 link-down host 2 eth1 for 3.2 s"
};

struct FaultPolicy {
  int max_concurrent = 2;
  // Processes never killed, so that the RSS and descriptor checks see some
  // that lived through the whole run: this host's worker, that host's daemon.
  int long_lived_worker_host = 1;
  int long_lived_daemon_host = 3;
  // The kinds drawn from (TOCL_SOAK_FAULTS).
  std::set<FaultKind> kinds{std::begin(kAllFaultKinds), std::end(kAllFaultKinds)};
};

// A fault as it was applied: when it began (the steady clock, as the
// workers' records) and, for a conn-kill, how many sockets ss destroyed.
struct BegunFault {
  PlannedFault fault;
  std::chrono::steady_clock::time_point start;
  int sockets = 0;
};

// Faults starting and ending within `duration`, in start order.
std::vector<PlannedFault> PlanFaults(uint64_t seed, std::chrono::milliseconds duration, int hosts,
                                     int networks, const FaultPolicy& policy);

class FaultInjector {
 public:
  FaultInjector(NetnsCluster& cluster, SoakWorkers& workers);
  ~FaultInjector();  // ends what is still active (best effort)

  // Whether the fault's host has no active fault.
  bool HostFree(int host) const;
  size_t active() const { return active_.size(); }
  // When the earliest active fault is due to end (max() when none is).
  std::chrono::steady_clock::time_point NextEnd() const;

  // Applies the fault now; it ends (is undone) once its duration passed.
  Status Begin(const PlannedFault& fault);
  // Undoes the faults whose time is up.
  Status EndDue(std::chrono::steady_clock::time_point now);
  // Undoes every active fault now.
  Status EndAll();

  // Faults begun, by kind; each as it was applied, in order.
  const std::map<FaultKind, int>& counts() const { return counts_; }
  const std::vector<BegunFault>& begun() const { return begun_; }

 private:
  struct Active {
    PlannedFault fault;
    std::chrono::steady_clock::time_point end;
    size_t begun = 0;  // its index in begun_
  };
  Status End(const Active& active);
  Status Qdisc(int host, int network, const std::vector<std::vector<std::string>>& commands);
  // conn-kill: destroys the established tcp connections between the host's
  // worker and the other workers on `network` (or all); how many sockets.
  Result<int> KillConnections(int host, int network);

  NetnsCluster& cluster_;
  SoakWorkers& workers_;
  std::string tc_;
  std::string ss_;
  std::vector<Active> active_;
  std::map<FaultKind, int> counts_;
  std::vector<BegunFault> begun_;
};

}  // namespace tocl::testing
