#include "runtime/peer_routes.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <thread>

#include "core/logger.h"
#include "runtime/internal_threads.h"
#include "runtime/notifier.h"

namespace tocl::runtime {
namespace {

std::atomic<uint64_t> next_instance{1};

// The last destination a thread sent to, so that a send loop skips the maps.
struct SendCache {
  uint64_t instance = 0;
  uint64_t to = 0;
  DestThread* dest = nullptr;
};
thread_local SendCache send_cache;

// The failure a looked-up entity's state means for sends, or ok.
Status UnreachableStatus(const Entity& entity) {
  if (entity.state != EntityState::kUnreachable) return Status::Ok();
  return Unavailable(HostDownReason(entity.gid.host()));
}

// A lookup the daemon could not answer: it is away (a restart ends calls
// Unavailable, or Cancelled when it stops with them in flight).
bool DaemonAway(const Status& status) {
  return status.code() == StatusCode::kUnavailable || status.code() == StatusCode::kCancelled;
}

// While the daemon is away: the first pause before asking again, and the
// longest (as Runtime::WaitForQuery's).
constexpr auto kFirstRetry = std::chrono::milliseconds(20);
constexpr auto kLastRetry = std::chrono::milliseconds(500);

}  // namespace

Status ProcessExitedStatus(Gid process, std::string_view reason) {
  return FailedPrecondition(fmt::format("process {} has exited ({})", process.ToString(), reason));
}

PeerRoutes::PeerRoutes(Settings settings, Lookup lookup, SendQueue::Events& queue_events,
                       const std::atomic<bool>& shutting_down)
    : settings_(settings),
      lookup_(std::move(lookup)),
      queue_events_(queue_events),
      shutting_down_(shutting_down),
      instance_(next_instance.fetch_add(1)) {}

void PeerRoutes::SetNetworks(std::vector<OwnNetwork> networks) {
  networks_ = std::move(networks);
  resolve_order_.resize(networks_.size());
  std::iota(resolve_order_.begin(), resolve_order_.end(), size_t{0});
  std::stable_partition(resolve_order_.begin(), resolve_order_.end(),
                        [&](size_t index) { return networks_[index].transport->host_local; });
}

// --- destinations ---------------------------------------------------------------

Result<DestThread*> PeerRoutes::ResolveDestination(Gid to) {
  if (send_cache.instance == instance_ && send_cache.to == to.raw()) return send_cache.dest;
  DestThread* dest = nullptr;
  {
    std::shared_lock lock(dest_mu_);
    auto it = dests_.find(to.raw());
    if (it != dests_.end()) dest = it->second.get();
  }
  if (dest == nullptr) {
    if (shutting_down_.load()) return Unavailable("the runtime is shutting down");
    // First send to this thread: the directory says whether it runs. A
    // thread is registered in the background a few milliseconds after it
    // enrolled, so one the directory does not know yet is waited for (up to
    // connect_timeout) while its process runs. The runtime's own mailboxes
    // are never registered: their process's lookup (ResolvePeerLocked) is
    // all there is to check.
    TOCL_RETURN_IF_ERROR(AwaitRegistration(to));
    std::unique_lock lock(dest_mu_);
    auto& slot = dests_[to.raw()];
    if (!slot) {
      slot = std::make_unique<DestThread>();
      slot->peer = &PeerOfProcessLocked(to.process());
    }
    dest = slot.get();
  }
  send_cache = SendCache{instance_, to.raw(), dest};
  return dest;
}

Result<SendQueue*> PeerRoutes::PeerOf(Gid to) {
  TOCL_ASSIGN_OR_RETURN(DestThread * dest, ResolveDestination(to));
  if (dest->exited.load(std::memory_order_acquire)) {
    return FailedPrecondition(fmt::format("thread {} has exited", to.ToString()));
  }
  return dest->peer;
}

Result<SendQueue*> PeerRoutes::PeerOfProcess(Gid process) {
  SendQueue* peer = nullptr;
  {
    std::shared_lock lock(dest_mu_);
    auto it = peers_.find(process.raw());
    if (it != peers_.end()) peer = it->second.get();
  }
  if (peer == nullptr) {
    std::unique_lock lock(dest_mu_);
    peer = &PeerOfProcessLocked(process);
  }
  return peer;
}

SendQueue& PeerRoutes::PeerOfProcessLocked(Gid process) {
  auto& entry = peers_[process.raw()];
  if (!entry) entry = std::make_unique<SendQueue>(process, settings_.queue_depth, queue_events_);
  return *entry;
}

Status PeerRoutes::ResolvePeerLocked(SendQueue& peer) {
  if (peer.state() == SendQueue::State::kReady) return Status::Ok();
  if (peer.state() == SendQueue::State::kFailed) return peer.failure();
  return ApplyLookupLocked(peer, lookup_(peer.process()));
}

Status PeerRoutes::ResolvePeer(SendQueue& peer, std::unique_lock<std::mutex>& lock) {
  if (peer.state() == SendQueue::State::kReady) return Status::Ok();
  if (peer.state() == SendQueue::State::kFailed) return peer.failure();
  Result<Entity> entity = lookup_(peer.process());
  if (!entity.ok() && DaemonAway(entity.status())) {
    // The daemon is restarting (the soak killed one under a first Send's
    // lookup, which failed "Socket closed"). Waited for like a registration
    // on its way, but not under the queue's lock: the progress thread takes
    // it to answer this peer meanwhile.
    lock.unlock();
    entity = LookupWaiting(peer.process(), Clock::now() + settings_.connect_timeout);
    lock.lock();
    // Another sender may have resolved it, or news failed it, meanwhile.
    if (peer.state() == SendQueue::State::kReady) return Status::Ok();
    if (peer.state() == SendQueue::State::kFailed) return peer.failure();
  }
  return ApplyLookupLocked(peer, std::move(entity));
}

Status PeerRoutes::ApplyLookupLocked(SendQueue& peer, Result<Entity> entity) {
  if (!entity.ok()) {
    if (entity.status().code() == StatusCode::kNotFound) {
      Status missing = NotFound(fmt::format("no process {}", peer.process().ToString()));
      // Another host's process reaches this host's daemon by replication,
      // a few milliseconds after it enrolled: one that sent to us first
      // (a long message's start, to be granted) may not be known here yet.
      // Failing it for good would drop every later answer to it; the next
      // send looks it up again. Only this host's daemon's "no" is final.
      if (peer.process().host() != process_.host()) {
        // Unless its host is down: that answer is as final as after a
        // lookup that found it.
        if (Status down = HostDownStatus(peer.process().host()); !down.ok()) {
          peer.Fail(down, /*host_down=*/true);
          return peer.failure();
        }
        return missing;
      }
      peer.Fail(std::move(missing));
      return peer.failure();
    }
    return entity.status().WithContext(fmt::format("look up {}", peer.process().ToString()));
  }
  if (entity->state == EntityState::kExited) {
    peer.Fail(ProcessExitedStatus(peer.process(), entity->exit_reason));
    return peer.failure();
  }
  // Checked after the lookup, under peer.mu(): a host that goes down
  // meanwhile either is seen here or fails this peer after we are done.
  Status down = UnreachableStatus(*entity);
  if (down.ok()) down = HostDownStatus(peer.process().host());
  if (!down.ok()) {
    peer.Fail(down, /*host_down=*/true);
    return peer.failure();
  }
  TOCL_RETURN_IF_ERROR(ConnectRoutesLocked(peer, entity->endpoints));
  peer.Ready();  // the first route the default: the host-local network when it connected
  return Status::Ok();
}

Status PeerRoutes::ConnectRoutesLocked(SendQueue& peer, const std::vector<Endpoint>& endpoints) {
  // One route per network that reaches it. On the same host a host-local
  // network (shm) alone when both have it (the others would add no
  // bandwidth, only copies); each of our networks bound to an IP pairs with
  // one of the peer's of its kind in its subnet.
  const bool same_host = peer.process().host() == process_.host();
  std::vector<bool> used(endpoints.size(), false);
  // Host-local first (resolve_order_): whether it connects decides about
  // the others.
  for (size_t index : resolve_order_) {
    const OwnNetwork& network = networks_[index];
    // (A host-local route that could not open, e.g. no channel left in the
    // peer's shm segment, leaves the others to carry same-host traffic.)
    if (!network.transport->host_local && same_host && !peer.rails().empty() &&
        networks_[peer.rails().front().rail].transport->host_local) {
      continue;
    }
    if (subsystem::IsLoopback(network.spec) && !same_host) continue;
    for (size_t e = 0; e < endpoints.size(); ++e) {
      const Endpoint& endpoint = endpoints[e];
      if (used[e] || subsystem::KindOf(endpoint.subsystem) != network.spec.kind) continue;
      std::optional<std::string> connect =
          network.transport->connect_address(network.spec, endpoint.address);
      if (!connect) continue;
      const std::string& address = *connect;
      if (!network.subsystem->Reaches(peer.process(), address)) continue;
      auto route = network.subsystem->Connect(peer.process(), address);
      if (!route.ok()) {
        Log().warn("tocl: cannot open a {} route to {}: {}", network.spec.name,
                   peer.process().ToString(), route.status().ToString());
        continue;
      }
      used[e] = true;
      peer.AddRoute(static_cast<int>(index), std::move(*route), network.subsystem->pool());
      break;
    }
  }
  if (peer.rails().empty()) {
    return Unavailable(fmt::format("no network of this process reaches {} (its endpoints: {})",
                                   peer.process().ToString(), endpoints.size()));
  }
  return Status::Ok();
}

Status PeerRoutes::AwaitRegistration(Gid to) {
  const auto deadline = Clock::now() + settings_.connect_timeout;
  auto delay = std::chrono::milliseconds(1);
  // The runtime's own mailboxes are never registered: their process is all
  // there is to wait for.
  const bool internal = IsInternalThread(to);
  // Another host's processes reach this host's daemon by replication, a
  // few milliseconds after they enrolled there: a Gid handed over faster
  // than that (a reply, a spawn's result) names a process not known here
  // yet. Only this host's daemon may say "no such process" at once.
  const bool remote = to.host() != process_.host();
  bool host_known = !remote;
  for (;;) {
    TOCL_RETURN_IF_ERROR(HostDownStatus(to.host()));
    if (!internal) {
      auto thread = LookupWaiting(to, deadline);
      if (thread.ok()) {
        if (thread->state == EntityState::kExited) {
          return FailedPrecondition(fmt::format("thread {} has exited", to.ToString()));
        }
        return UnreachableStatus(*thread);
      }
      if (thread.status().code() != StatusCode::kNotFound) {
        return thread.status().WithContext(fmt::format("look up {}", to.ToString()));
      }
    }
    auto owner = LookupWaiting(to.process(), deadline);
    const bool owner_unknown = !owner.ok() && owner.status().code() == StatusCode::kNotFound;
    if (!owner.ok() && !owner_unknown) {
      return owner.status().WithContext(fmt::format("look up {}", to.process().ToString()));
    }
    if (owner_unknown && !remote) {
      return NotFound(fmt::format("no process {}", to.process().ToString()));
    }
    if (owner_unknown && !host_known) {
      TOCL_RETURN_IF_ERROR(CheckHostKnown(to.host(), deadline));
      host_known = true;
    }
    if (owner.ok()) {
      if (owner->state == EntityState::kExited) {
        return ProcessExitedStatus(to.process(), owner->exit_reason);
      }
      TOCL_RETURN_IF_ERROR(UnreachableStatus(*owner));
      if (internal) return Status::Ok();
    }
    if (Clock::now() + delay > deadline) {
      if (owner_unknown) {
        return NotFound(
            fmt::format("no process {}: the daemon of this host has not heard of it "
                        "within {} ms",
                        to.process().ToString(), settings_.connect_timeout.count()));
      }
      return NotFound(
          fmt::format("no thread {}: its process runs but has not registered it", to.ToString()));
    }
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::milliseconds(100));
  }
}

Status PeerRoutes::CheckHostKnown(Gid host, Clock::time_point deadline) {
  // Replication may lag behind a Gid handed over; membership hardly does:
  // every daemon has a host row for each member it knows, and learns of a
  // new member within a heartbeat of its join, before it could replicate
  // any of its processes. A host the directory does not have is (but in
  // that first heartbeat) not in the cluster, and waiting would not bring it.
  auto known = LookupWaiting(host, deadline);
  if (known.ok()) return Status::Ok();
  if (known.status().code() != StatusCode::kNotFound) {
    return known.status().WithContext(fmt::format("look up {}", host.ToString()));
  }
  return NotFound(fmt::format("no host {} in the cluster (the daemon of {} knows no such host)",
                              host.ToString(), process_.host().ToString()));
}

Result<Entity> PeerRoutes::LookupWaiting(Gid gid, Clock::time_point deadline) {
  auto pause = std::chrono::duration_cast<Clock::duration>(kFirstRetry);
  for (;;) {
    Result<Entity> entity = lookup_(gid);
    if (entity.ok() || !DaemonAway(entity.status())) return entity;
    if (shutting_down_.load()) return Unavailable("the runtime is shutting down");
    if (Clock::now() + pause > deadline) {
      return Unavailable(fmt::format("the daemon did not answer within connect_timeout ({} ms): {}",
                                     settings_.connect_timeout.count(), entity.status().message()));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(2 * pause, std::chrono::duration_cast<Clock::duration>(kLastRetry));
  }
}

// --- the directory's news ---------------------------------------------------------

Status PeerRoutes::HostDownStatus(Gid host) const {
  // Only before a peer is ready (its first send, a reconnect): no lock on
  // the path of every message.
  std::lock_guard lock(hosts_mu_);
  if (down_hosts_.count(host.host_index()) == 0) return Status::Ok();
  return Unavailable(HostDownReason(host.host()));
}

template <typename Fn>
void PeerRoutes::ForEachQueueOn(Gid host, Fn&& fn) {
  std::shared_lock lock(dest_mu_);
  for (auto& [raw, peer] : peers_) {
    if (peer->process().host() != host) continue;
    std::lock_guard peer_lock(peer->mu());
    fn(*peer);
  }
}

void PeerRoutes::HostDown(Gid host, const Status& why) {
  {
    std::lock_guard lock(hosts_mu_);
    down_hosts_.insert(host.host_index());
  }
  Log().warn("tocl: {}: failing sends to its processes", why.message());
  ForEachQueueOn(host, [&](SendQueue& peer) {
    if (peer.state() == SendQueue::State::kFailed) return;  // exited: stays so
    peer.Fail(why, /*host_down=*/true);
  });
}

void PeerRoutes::HostUp(Gid host) {
  {
    std::lock_guard lock(hosts_mu_);
    down_hosts_.erase(host.host_index());
  }
  Log().info("tocl: host {} answers again", host.ToString());
  // The next send looks its peers up and connects again. Their sequence
  // numbers go on: a process that lived through the outage keeps its order.
  ForEachQueueOn(host, [](SendQueue& peer) { (void)peer.ResetAfterHostDown(); });
}

void PeerRoutes::Exited(Gid gid, const std::string& reason) {
  std::shared_lock lock(dest_mu_);
  if (gid.is_thread()) {
    auto it = dests_.find(gid.raw());
    if (it != dests_.end()) it->second->exited.store(true, std::memory_order_release);
    return;
  }
  if (!gid.is_process()) return;
  for (auto& [raw, dest] : dests_) {
    if (Gid::FromRaw(raw).process() == gid) dest->exited.store(true, std::memory_order_release);
  }
  auto it = peers_.find(gid.raw());
  if (it == peers_.end()) return;
  std::lock_guard peer_lock(it->second->mu());
  it->second->Fail(ProcessExitedStatus(gid, reason));
}

void PeerRoutes::RouteDown(Gid process, int network) {
  std::shared_lock lock(dest_mu_);
  auto it = peers_.find(process.raw());
  if (it == peers_.end()) return;
  std::lock_guard peer_lock(it->second->mu());
  it->second->RouteDown(network);
}

// --- every queue --------------------------------------------------------------------

bool PeerRoutes::Drained() {
  std::shared_lock lock(dest_mu_);
  for (auto& [raw, peer] : peers_) {
    std::lock_guard peer_lock(peer->mu());
    if (!peer->Drained()) return false;
  }
  return true;
}

void PeerRoutes::Close(const Status& why) {
  std::unique_lock lock(dest_mu_);
  for (auto& [raw, peer] : peers_) {
    std::lock_guard peer_lock(peer->mu());
    peer->Close(why);
  }
}

void PeerRoutes::PostControl(Gid process, int network, const wire::Header& header) {
  auto found = PeerOfProcess(process);
  if (!found.ok()) return;
  SendQueue& peer = **found;
  std::lock_guard lock(peer.mu());
  if (Status status = ResolvePeerLocked(peer); !status.ok()) {
    Log().debug("tocl: cannot answer {}: {}", process.ToString(), status.ToString());
    return;
  }
  // Over the default route when none goes over `network` (-1).
  Status status = peer.PostControl(peer.RouteOver(network), header);
  // Out of pool buffers is worth a word; a broken route or a failed process
  // was told already.
  if (status.code() == StatusCode::kResourceExhausted) {
    Log().warn("tocl: cannot answer {}: {}", process.ToString(), status.ToString());
  }
}

void PeerRoutes::AddSentStats(std::span<NetworkStats> by_network) const {
  const auto now = Clock::now();
  std::shared_lock lock(dest_mu_);
  for (auto& [raw, peer] : peers_) {
    std::lock_guard peer_lock(peer->mu());
    for (size_t route = 0; route < peer->rails().size(); ++route) {
      const PeerRail& rail = peer->rails()[route];
      const RailHealth& health = peer->health()[route];
      NetworkStats& stats = by_network[rail.rail];
      const SendQueue::SentCount sent = peer->Sent(route);
      stats.frames_sent += sent.frames;
      stats.bytes_sent += sent.bytes;
      if (rail.fragments_sent == 0 && health.bandwidth == 0) continue;
      stats.peers.push_back(NetworkPeerStats{peer->process(), health.bandwidth, rail.fragments_sent,
                                             rail.fragments_resent, !health.UsableAt(now)});
    }
  }
  for (NetworkStats& stats : by_network) {
    std::sort(stats.peers.begin(), stats.peers.end(),
              [](const auto& a, const auto& b) { return a.fragments_sent > b.fragments_sent; });
  }
}

}  // namespace tocl::runtime
