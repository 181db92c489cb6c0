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
// The schedule is drawn from the seed alone (PlanFaults), so a failing run
// can be replayed with the same faults in the same order; how the system
// times its reactions still varies.
//
// Threading: one owner thread (the cluster's).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "netns_cluster.h"
#include "soak_workers.h"

namespace tocl::testing {

enum class FaultKind { kWorkerKill, kDaemonKill, kLinkDown, kDelay, kLoss };
inline constexpr FaultKind kAllFaultKinds[] = {FaultKind::kWorkerKill, FaultKind::kDaemonKill,
                                               FaultKind::kLinkDown, FaultKind::kDelay,
                                               FaultKind::kLoss};
std::string FaultKindName(FaultKind kind);  // "worker-kill", ...

struct PlannedFault {
  int number = 0;                   // 1, 2, ...
  std::chrono::milliseconds start;  // from the start of the fault phase
  FaultKind kind = FaultKind::kLinkDown;
  int host = 1;
  int network = 0;  // link faults only
  std::chrono::milliseconds duration;

  std::string Describe() const;  // "#12 link-down host 2 eth1 for 3.2 s"
};

struct FaultPolicy {
  int max_concurrent = 2;
  // Processes never killed, so that the RSS and descriptor checks see some
  // that lived through the whole run: this host's worker, that host's daemon.
  int long_lived_worker_host = 1;
  int long_lived_daemon_host = 3;
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

  // Faults begun, by kind.
  const std::map<FaultKind, int>& counts() const { return counts_; }

 private:
  struct Active {
    PlannedFault fault;
    std::chrono::steady_clock::time_point end;
  };
  Status End(const Active& active);
  Status Qdisc(int host, int network, const std::vector<std::vector<std::string>>& commands);

  NetnsCluster& cluster_;
  SoakWorkers& workers_;
  std::string tc_;
  std::vector<Active> active_;
  std::map<FaultKind, int> counts_;
};

}  // namespace tocl::testing
