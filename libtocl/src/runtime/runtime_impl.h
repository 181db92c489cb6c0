// Runtime::Impl: the pieces of a process's runtime and how they meet.
//
//   Send ──> SendQueue (send_queue.h: FIFO queue, seq per thread pair) ──> Route of a Rail
//   Send (long) ──> LongSender (long_sender.h): fragments over every Rail that reaches
//                   the peer (fragment_scheduler.h), posted through its SendQueue
//   Rail's Subsystem ──> RailSink ──> OnFrame ──> PairOrder (pair_order.h) ──> ReceiveSide
//                                       │          └─ long starts ──> LongReceiver
//                                       ├──> fragments, a sender's control ──> LongReceiver
//                                       │    (long_receiver.h)
//                                       └──> a receiver's answers ──> LongSender
//   Recv ──> ReceiveSide (receive_side.h): the thread's Mailbox, polling
//            through the ProgressEngine while it waits
//
// The parts see the runtime only through narrow events (SendQueue::Events,
// LongReceiver::Events, LongSender::Events, the ReceiveSide's and
// ProgressEngine's hooks), implemented here by small adapters: each part
// is tested without a daemon, and none grows into the runtime's state.
//
// Lock order: dest_mu -> a peer's mu() -> LongSender's table -> a LongSend.
// The LongReceiver's lock is never held while a peer is resolved (which
// takes dest_mu and may ask the directory): the control frames it decides
// are queued and sent once it is released.
//
// A Rail is one open network: one subsystem instance (a process may have
// several tcp networks, one per NIC).
//
// Member order is destruction order reversed: the reactor outlives the
// subsystems (their fds), the subsystems (their pools) outlive the
// mailboxes and peers that hold buffers.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <stop_token>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "buffers/buffer_pool.h"
#include "buffers/slot_ref.h"
#include "runtime/directory_link.h"
#include "runtime/epoll_reactor.h"
#include "runtime/internal_threads.h"
#include "runtime/long_message.h"
#include "runtime/long_receiver.h"
#include "runtime/long_sender.h"
#include "runtime/mailbox.h"
#include "runtime/pair_order.h"
#include "runtime/progress_engine.h"
#include "runtime/receive_side.h"
#include "runtime/send_queue.h"
#include "security/cluster_key.h"
#include "subsystem/subsystem.h"
#include "subsystem/transport_registry.h"
#include "tocl/runtime.h"

namespace tocl::runtime {
class Notifier;
class ThreadService;
}  // namespace tocl::runtime

namespace tocl {

// Where one rail's arrivals go: the runtime, told which rail.
class RailSink final : public subsystem::Sink {
 public:
  RailSink(Runtime::Impl& impl, int rail) : impl_(impl), rail_(rail) {}
  Status OnMessage(Gid from_process, buffers::SlotRef slot) override;
  bool Congested() const override;

 private:
  Runtime::Impl& impl_;
  const int rail_;
};

// What the send queues need of the runtime: the poller's list of queues
// with waiting frames, the network failure count, progress while a sender
// waits for room.
class QueueEvents final : public runtime::SendQueue::Events {
 public:
  explicit QueueEvents(Runtime::Impl& impl) : impl_(impl) {}
  void Queued(runtime::SendQueue& queue, bool list) override;
  void Rerouted(const runtime::SendQueue& queue, int broken_network,
                int alternative_network) override;
  void AwaitProgress() override;

 private:
  Runtime::Impl& impl_;
};

// What the long-message receiver needs of the runtime: control frames to a
// process (resolving it), its pair's order skipping a start, the poller.
class LongReceiverEvents final : public runtime::LongReceiver::Events {
 public:
  explicit LongReceiverEvents(Runtime::Impl& impl) : impl_(impl) {}
  void SendControl(Gid process, int network, const wire::Header& header) override;
  Status SkipInOrder(Gid from_process, const runtime::LongKey& key) override;
  void HousekeepingDue(bool wake) override;

 private:
  Runtime::Impl& impl_;
};

// What a long send needs of the runtime: the peer's routes, the rails'
// names and failure counts, the poller listening for bells.
class LongSenderEvents final : public runtime::LongSender::Events {
 public:
  explicit LongSenderEvents(Runtime::Impl& impl) : impl_(impl) {}
  Status ResolveLocked(runtime::SendQueue& peer) override;
  std::string NetworkName(int network) const override;
  void NetworkFailed(int network) override;
  void ListenForBells(bool on) override;

 private:
  Runtime::Impl& impl_;
};

struct Rail {
  subsystem::NetworkSpec spec;
  const subsystem::Transport* transport = nullptr;  // its kind, in CompiledTransports()
  std::unique_ptr<RailSink> sink;
  std::unique_ptr<subsystem::Subsystem> subsystem;
  std::string published;                         // the address in the directory
  std::function<void(NetworkStats&)> add_stats;  // what only its kind reports; may be empty
  // Counted by the polling thread, read by Networks().
  std::atomic<uint64_t> frames_received{0};
  std::atomic<uint64_t> bytes_received{0};
  std::atomic<uint64_t> failures{0};
};

struct Runtime::Impl final {
  explicit Impl(RuntimeOptions opts);
  ~Impl();

  Status Open();
  // `resolved_options`: ResolvedOptions::options, what the network's kind
  // takes its settings from.
  Status OpenRail(const subsystem::NetworkSpec& spec, const RuntimeOptions& resolved_options);
  Status Shutdown(std::chrono::milliseconds flush_timeout);

  // --- arrivals (the polling thread) ---
  // Each takes the frame's reference and drops it on every path.
  Status OnFrame(int rail, Gid from_process, buffers::SlotRef slot);
  // A short message or long-message start whose turn came in its pair's
  // order (pair_order's callback).
  Status DeliverInOrder(Gid from_process, buffers::SlotRef slot);
  bool Congested() const { return receive.Congested(); }

  // --- threads ---
  // Numbers and enrolls a thread (EnrollThread without the public checks).
  Result<Gid> EnrollThread(std::string name, Attributes attributes);
  // The thread leaves (idempotent): its mailbox, its directory entry, its
  // notification watches.
  void LeaveThread(Gid thread);
  // A mailbox at a reserved index (internal_threads.h), never registered.
  runtime::Mailbox* NewInternalMailbox(uint32_t index) { return receive.AddInternal(index); }
  size_t ShortMaxPayload() const;

  // --- directory ---
  // Looks `gid` up at its own host's daemon (peer_daemons) or ours.
  Result<Entity> Lookup(Gid gid);
  // A change from the daemon's stream (the watcher thread).
  void OnChange(const ChangeEvent& event);
  // Hosts that stop answering heartbeats (host_reachability.cc): their
  // peers fail, sends to them fail at once until they come back.
  void OnHostUnreachable(Gid host);
  void OnHostReachable(Gid host);
  // Unavailable "host h3 is down (no heartbeat)" while it is; ok otherwise.
  Status HostDownStatus(Gid host) const;
  // The failure a looked-up entity in `entity.state` means for sends, or ok.
  Status UnreachableStatus(const Entity& entity) const;
  // A message from `source` (any gid) put straight into local thread
  // `self`'s mailbox: exit notices.
  Status DeliverNotice(Gid self, Gid source, Tag tag, std::span<const std::byte> payload);

  // --- send side ---
  Result<runtime::DestThread*> ResolveDestination(Gid to);
  // Waits until the directory knows thread `to` (or says it exited, or
  // that its process does not run): the first send to a thread.
  Status AwaitRegistration(Gid to);
  // NotFound at once for a host the directory does not know (not a member).
  Status CheckHostKnown(Gid host);
  Status ResolvePeerLocked(runtime::SendQueue& peer);
  Status CheckSender(Gid from) const;
  // Everything about a send that does not need the destination: the
  // sender, the tag, the destination's form, the runtime's state.
  Status CheckSend(Gid from, Gid to, Tag tag) const;
  // The peer of thread `to` (looked up on first use); FailedPrecondition
  // when the thread has exited.
  Result<runtime::SendQueue*> PeerOf(Gid to);
  // Sends the reference in `slot` (header length set): Ok takes it (`slot`
  // is left empty); on error it is still in `slot`, the caller's.
  // PostSlot skips CheckSend.
  Status SendSlot(Gid from, Gid to, Tag tag, buffers::SlotRef& slot, Network network);
  Status PostSlot(Gid from, Gid to, Tag tag, buffers::SlotRef& slot, Network network);
  Status SendCopy(Gid from, Gid to, Tag tag, std::span<const std::byte> payload);
  // The peer of process `process` (resolved), for control frames.
  Result<runtime::SendQueue*> PeerOfProcess(Gid process);
  // The peer of process `process`, made on first use (dest_mu held
  // exclusively).
  runtime::SendQueue& PeerOfProcessLocked(Gid process);
  int RailOfPool(const buffers::BufferPool* pool) const;

  // --- long messages (long_sender.h, long_receiver.h) ---
  // A message over the short maximum: whole into a local thread's mailbox,
  // or by long_sender to another process.
  Status SendLong(Gid from, Gid to, Tag tag, std::span<const std::byte> payload);

  // Into a local thread's mailbox: Ok takes the reference in `slot`; on
  // error (no such thread, or it left) it is still the caller's.
  Status DeliverLocal(buffers::SlotRef& slot) { return receive.Deliver(slot); }
  // Retries queued sends (the poller). True when some still wait.
  bool FlushQueued();
  void OnExited(Gid gid, const std::string& reason);
  subsystem::Subsystem* SubsystemFor(Network network) const;
  std::vector<PoolClassStats> PoolStats() const;
  std::vector<tocl::NetworkStats> Networks() const;

  RuntimeOptions options;  // as the application gave them (Runtime::options())
  Gid process;
  std::unique_ptr<runtime::DirectoryLink> link;
  std::unique_ptr<runtime::EpollReactor> reactor;
  buffers::PoolBudget budget;
  std::vector<std::unique_ptr<Rail>> rails;  // fixed after Open
  // What Network::kFastest means: the first open kind in the transport
  // registry's order (fastest first). Set in Open.
  subsystem::Subsystem* fastest = nullptr;
  // The indexes of `rails` in the order ResolvePeerLocked tries them: the
  // host-local ones first, each group as listed. Set in Open.
  std::vector<size_t> resolve_order;
  // Some open network copies straight into receivers' buffers
  // (Transport::post_copy): SendCopy tries Route::PostCopy first.
  bool post_copy = false;
  std::unique_ptr<runtime::ProgressEngine> progress;
  uint32_t num_classes = 0;
  // The cluster's data-plane secret from the enrollment (none without
  // credentials): networks that connect prove it on every connection.
  security::ClusterKey data_plane_key;
  std::map<uint32_t, std::string> peer_daemons;
  std::mutex peer_clients_mu;
  std::map<uint32_t, std::unique_ptr<DirectoryClient>> peer_clients;  // guarded by peer_clients_mu

  std::atomic<uint32_t> next_thread{1};
  std::atomic<bool> networks_open{false};  // release/acquire: `rails` is complete
  std::atomic<bool> shutting_down{false};
  std::atomic<bool> shut_down{false};
  // Mailboxes, unexpected memory, the wait policy (receive_side.h).
  runtime::ReceiveSide receive;
  // Requested by Shutdown: ends every WaitForQuery at once (Cancelled).
  std::stop_source query_stop;
  std::mutex shutdown_mu;

  // Destinations: peers by process, threads by gid. Entries are never
  // removed while the runtime lives (their addresses are cached).
  mutable std::shared_mutex dest_mu;
  QueueEvents queue_events{*this};  // before `peers`: each of them holds it
  std::unordered_map<uint64_t, std::unique_ptr<runtime::SendQueue>> peers;   // guarded by dest_mu
  std::unordered_map<uint64_t, std::unique_ptr<runtime::DestThread>> dests;  // guarded by dest_mu
  const uint64_t instance;  // tells thread-local caches of different runtimes apart

  std::mutex blocked_mu;
  std::vector<runtime::SendQueue*> blocked;   // guarded by blocked_mu: peers with queued sends
  std::vector<runtime::SendQueue*> flushing;  // the poll token holder's: blocked, being retried

  // Receive order per (source thread, destination thread) pair: the
  // polling thread's (OnFrame, long_receiver's skips).
  runtime::PairOrder pair_order;

  // Long messages being received (the poller's) and sent (by their sending
  // threads); each after the events it holds, and after `receive`.
  LongReceiverEvents long_receiver_events{*this};
  runtime::LongReceiver long_receiver;
  LongSenderEvents long_sender_events{*this};
  runtime::LongSender long_sender;

  // Hosts the daemon says are down (by host index).
  mutable std::mutex hosts_mu;
  std::unordered_set<uint32_t> down_hosts;  // guarded by hosts_mu
  // down_hosts.size(), read without the lock on the send path.
  std::atomic<size_t> down_host_count{0};

  Gid parent;  // $TOCL_PARENT
  // Last: they use everything above, and are stopped by Shutdown.
  std::unique_ptr<runtime::Notifier> notifier;
  std::unique_ptr<runtime::ThreadService> spawn_service;
};

}  // namespace tocl
