// Peer routes: where a message to a thread of another process goes. For
// each destination thread, its DestThread; for each destination process,
// one SendQueue (send_queue.h) with a route per network of ours that
// reaches it; and the hosts the directory says are down.
//
// A destination is learned from the directory on first use and kept:
//   ResolveDestination(thread) ──> AwaitRegistration: does it run? (the
//       directory may not know it yet: its registration is on its way)
//   ──> DestThread ──> the SendQueue of its process (one per process)
//   ResolvePeerLocked(queue) ──> the process's endpoints ──> a route per
//       network that reaches one, host-local networks first
// Later sends find both in the tables (or in a thread-local cache of the
// last destination) and never wait on the directory. Exits, hosts that go
// down and come back (the directory's change stream) fail or reset the
// queues.
//
// Only this host's daemon may say "no such process" at once: another
// host's processes reach it by replication, a few milliseconds after they
// enrolled, and a Gid can be handed over faster than that.
//
// What it needs of the runtime comes through its constructor: a directory
// lookup, how to make a SendQueue (depth, events), the runtime's
// shutting-down flag; and, once open, our networks (SetNetworks). It never
// sees the runtime itself.
//
// Locks, in the order they are taken:
//   dest_mu_ ──> SendQueue::mu() ──> hosts_mu_, the lookup's own locks
// (a queue's lane locks come after its mu() and are the queue's own
// business: send_queue.h)
// dest_mu_ is never taken with a queue's mu() held, nor held across a
// directory lookup; ResolvePeerLocked runs under the queue's mu() and asks
// the directory there (ResolvePeer lets go of it while it waits for a
// daemon that is away). (SendQueue::Events::Queued, called under mu(),
// takes QueueEvents' waiting_mu after it.)
//
// Threading: every method is safe from any thread; those named *Locked
// want the queue's mu() held.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "runtime/send_queue.h"
#include "subsystem/network_spec.h"
#include "subsystem/subsystem.h"
#include "subsystem/transport_registry.h"
#include "tocl/entity.h"
#include "tocl/network_stats.h"

namespace tocl::runtime {

// FailedPrecondition "process h1.p3 has exited (reason)": what sends to an
// exited process (and spawns waiting on it) end with.
Status ProcessExitedStatus(Gid process, std::string_view reason);

// One of this process's networks as the choice of routes sees it (the
// runtime's Rail): its index in the list given to SetNetworks is the
// `network` of PeerRail::rail.
struct OwnNetwork {
  subsystem::NetworkSpec spec;
  const subsystem::Transport* transport = nullptr;  // its kind: host_local, connect_address
  subsystem::Subsystem* subsystem = nullptr;        // Reaches, Connect, pool
};

class PeerRoutes {
 public:
  using Clock = std::chrono::steady_clock;
  // The directory's entry for a gid (HostDaemons::Lookup).
  using Lookup = std::function<Result<Entity>(Gid gid)>;

  struct Settings {
    // Queued frames at which a sender waits (RuntimeOptions::send_queue_depth).
    size_t queue_depth = 0;
    // How long a first send waits for the directory to learn of a thread
    // whose process runs (RuntimeOptions::connect_timeout).
    std::chrono::milliseconds connect_timeout{0};
  };

  // `queue_events` (every SendQueue's) and `shutting_down` must outlive
  // this.
  PeerRoutes(Settings settings, Lookup lookup, SendQueue::Events& queue_events,
             const std::atomic<bool>& shutting_down);
  PeerRoutes(const PeerRoutes&) = delete;
  PeerRoutes& operator=(const PeerRoutes&) = delete;

  // The process is known once it enrolled, the networks once they are
  // open; both before the first send (fixed from then on).
  void SetProcess(Gid process) { process_ = process; }
  // Routes are tried over them host-local first, then in the given order.
  void SetNetworks(std::vector<OwnNetwork> networks);

  // --- destinations ---
  // The destination thread `to` of another process, looked up on first use
  // (AwaitRegistration) and kept.
  Result<DestThread*> ResolveDestination(Gid to);
  // The queue of thread `to`'s process; FailedPrecondition once the thread
  // has exited.
  Result<SendQueue*> PeerOf(Gid to);
  // The queue of process `process` (made on first use, not resolved): for
  // control frames.
  Result<SendQueue*> PeerOfProcess(Gid process);
  // Posts control frame `header` to process `process` over `network`'s
  // route (the default when none goes over it): a long message's grant,
  // ack or abort. Dropped when the process cannot be reached (its sender
  // recovers by probes and timeouts).
  void PostControl(Gid process, int network, const wire::Header& header);
  // Looks the queue's process up and opens its routes, unless it is ready
  // (Ok) or failed (its failure). Failed for good when the process exited,
  // this host's daemon does not know it, or its host is down; a process of
  // another host that our daemon does not know yet is NotFound and looked
  // up again next time. A daemon that cannot answer (restarting) is
  // Unavailable at once: the progress thread, answering a long message,
  // must not wait for it.
  Status ResolvePeerLocked(SendQueue& peer);
  // ResolvePeerLocked for a sending thread (`lock` holds peer.mu()): when
  // the daemon cannot answer the lookup, it is asked again with the lock
  // released (others answer the peer meanwhile) until it does or
  // connect_timeout passes (then Unavailable saying so).
  Status ResolvePeer(SendQueue& peer, std::unique_lock<std::mutex>& lock);
  // Waits (up to connect_timeout) until the directory knows thread `to`:
  // FailedPrecondition when it or its process exited, Unavailable when its
  // host is down or the daemon did not answer within the time, NotFound
  // when its process is not (or no longer) known. The runtime's internal
  // threads are never registered: for them, their process is all there is
  // to wait for.
  Status AwaitRegistration(Gid to);

  // --- the directory's news ---
  // Unavailable "host h3 is down (no heartbeat)" while it is; ok otherwise.
  Status HostDownStatus(Gid host) const;
  // Host `host` stopped answering heartbeats: its processes' queues fail
  // with `why` (and reset when it comes back), later sends to it fail at
  // once.
  void HostDown(Gid host, const Status& why);
  // Host `host` answers again: its queues are looked up and connected again
  // on their next send; their sequence numbers go on.
  void HostUp(Gid host);
  // Thread or process `gid` exited: sends to it fail from now on.
  void Exited(Gid gid, const std::string& reason);
  // Our route to process `process` over `network` lost its connection
  // (SendQueue::RouteDown). Nothing when we have no queue for it.
  void RouteDown(Gid process, int network);

  // --- every queue ---
  // Nothing waits in any queue or route.
  bool Drained();
  // Shutdown: every queue fails with `why` and closes its routes.
  void Close(const Status& why);
  // What went to each peer, added to `by_network` (indexed as the networks
  // given to SetNetworks): frames and bytes sent, and a NetworkPeerStats for
  // each peer a network carried fragments to or learned a bandwidth of
  // (most fragments first).
  void AddSentStats(std::span<NetworkStats> by_network) const;

 private:
  // The queue of process `process`, made on first use (dest_mu_ held
  // exclusively).
  SendQueue& PeerOfProcessLocked(Gid process);
  // lookup_, asked again while the daemon cannot answer (a restart) until
  // `deadline`; then Unavailable naming connect_timeout and the last error.
  Result<Entity> LookupWaiting(Gid gid, Clock::time_point deadline);
  // The part of ResolvePeerLocked after the lookup, given its answer.
  Status ApplyLookupLocked(SendQueue& peer, Result<Entity> entity);
  // Routes to `peer` over each of our networks that reaches one of
  // `endpoints`; with none, Unavailable and the queue stays unresolved.
  Status ConnectRoutesLocked(SendQueue& peer, const std::vector<Endpoint>& endpoints);
  // NotFound at once for a host the directory does not know (not a member);
  // a daemon that cannot answer is waited for until `deadline`.
  Status CheckHostKnown(Gid host, Clock::time_point deadline);
  // Calls `fn(queue)` for the queue of each process on `host`, with its
  // mu() held.
  template <typename Fn>
  void ForEachQueueOn(Gid host, Fn&& fn);

  const Settings settings_;
  const Lookup lookup_;
  SendQueue::Events& queue_events_;
  const std::atomic<bool>& shutting_down_;
  // Tells thread-local caches (the last destination) of different
  // instances apart.
  const uint64_t instance_;
  Gid process_;
  std::vector<OwnNetwork> networks_;  // fixed by SetNetworks
  // The indexes of networks_ in the order ResolvePeerLocked tries them: the
  // host-local ones first (whether one connects decides about the others),
  // each group in its given order.
  std::vector<size_t> resolve_order_;

  // Entries are never removed while this lives (their addresses are
  // cached).
  mutable std::shared_mutex dest_mu_;
  std::unordered_map<uint64_t, std::unique_ptr<SendQueue>> peers_;   // guarded by dest_mu_
  std::unordered_map<uint64_t, std::unique_ptr<DestThread>> dests_;  // guarded by dest_mu_

  // Hosts the daemon says are down (by host index).
  mutable std::mutex hosts_mu_;
  std::unordered_set<uint32_t> down_hosts_;  // guarded by hosts_mu_
};

}  // namespace tocl::runtime
