// Runtime::Impl: the pieces of a process's runtime and how they meet. Each
// piece is a type of its own that sees only what it is given (callbacks, a
// small Events interface, the parts it works on), never Impl; Impl owns
// them, wires them together in Open and takes them down in Shutdown. So
// only runtime.cc includes this header (and long_send.cc, long_receive.cc
// until long messages are types of their own: the few Impl methods that
// only forward to a part are kept for them).
//
//   Send ──> SendSide (send_side.h: checks; local mailbox, or)
//        ──> PeerRoutes (peer_routes.h: the destination thread, the
//            SendQueue of its process, its routes chosen from the directory)
//        ──> SendQueue (send_queue.h: FIFO queue, seq per thread pair) ──> Route of a Rail
//            (frames that wait are retried by the poller: QueueEvents)
//   Send (long) ──> LongSend: fragments over every Rail that reaches the peer
//                   (fragment_scheduler.h), posted through its SendQueue
//   Rail's Subsystem ──> RailSink ──> OnFrame ──> PairOrder (pair_order.h) ──> ReceiveSide
//                                            └──> long messages (long_receive.cc)
//   Recv ──> ReceiveSide (receive_side.h): the thread's Mailbox, polling
//            through the ProgressEngine while it waits
//   Directory: DirectoryLink (our daemon: enrollment, registrations, the
//            change stream) ──> OnExited, ApplyClusterChange (cluster_events.h)
//            ──> PeerRoutes, ThreadService, Notifier; HostDaemons
//            (host_daemons.h) answers lookups
//
// A Rail is one open network: one subsystem instance (a process may have
// several tcp networks, one per NIC); Rails (rails.h) holds them, and a
// rail's index is what routes and statistics call a network.
//
// Locks, in the order they are taken: PeerRoutes' dest_mu ──>
// SendQueue::mu() ──> QueueEvents' waiting_mu (Queued), outbound_mu
// (SendLong), a LongSend's mu, PeerRoutes' hosts_mu and directory lookups.
// inbound_mu is never held while a peer is resolved (control frames wait in
// control_outbox until it is released).
//
// Member order is destruction order reversed: the reactor outlives the
// subsystems (their fds), the subsystems (their pools) outlive the
// mailboxes and peers that hold buffers.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "buffers/buffer_pool.h"
#include "buffers/slot_ref.h"
#include "runtime/directory_link.h"
#include "runtime/epoll_reactor.h"
#include "runtime/host_daemons.h"
#include "runtime/internal_threads.h"
#include "runtime/long_message.h"
#include "runtime/mailbox.h"
#include "runtime/pair_order.h"
#include "runtime/peer_routes.h"
#include "runtime/progress_engine.h"
#include "runtime/queue_events.h"
#include "runtime/rails.h"
#include "runtime/receive_side.h"
#include "runtime/runtime_options.h"
#include "runtime/send_queue.h"
#include "runtime/send_side.h"
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

// The record of one open network (rails.h), by the name long_send.cc uses.
using runtime::Rail;

struct Runtime::Impl final {
  explicit Impl(RuntimeOptions opts);
  ~Impl();

  Status Open();
  // Opens the networks (Open's second half, once enrolled and polling can
  // start): the rails, what routes are chosen from, the endpoints published.
  Status OpenNetworks(const runtime::ResolvedOptions& resolved);
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
  size_t ShortMaxPayload() const;

  // Parts' own, under the names long_send.cc and long_receive.cc call
  // them by (peer_routes.h, send_side.h).
  Result<runtime::SendQueue*> PeerOf(Gid to) { return routes.PeerOf(to); }
  Result<runtime::SendQueue*> PeerOfProcess(Gid peer_process) {
    return routes.PeerOfProcess(peer_process);
  }
  Status ResolvePeerLocked(runtime::SendQueue& peer) { return routes.ResolvePeerLocked(peer); }
  Status CheckSend(Gid from, Gid to, Tag tag) const { return send_side.CheckSend(from, to, tag); }
  Status DeliverLocal(buffers::SlotRef& slot) { return receive.Deliver(slot); }

  // --- long messages (long_send.cc, long_receive.cc) ---
  Status SendLong(Gid from, Gid to, Tag tag, std::span<const std::byte> payload);
  // SendLong once its start is posted: until the message is acknowledged
  // or fails. `peer_lock` holds peer.mu() (released while it waits).
  Status AwaitLongLocked(runtime::SendQueue& peer, std::unique_lock<std::mutex>& peer_lock,
                         uint64_t generation, runtime::LongSend& send);
  // One round of the fragment scheduler for `send` (its mu held): failed
  // networks, then fragments posted until the windows are full.
  Status PlaceFragmentsLocked(runtime::SendQueue& peer, runtime::LongSend& send,
                              std::chrono::steady_clock::time_point now);
  void ProbeLocked(runtime::SendQueue& peer, const runtime::LongKey& key, size_t round,
                   std::chrono::steady_clock::time_point now);
  // A control frame from the sending thread of long message `key` to its
  // receiver (abort, probe) on the peer's route `route` (an index into
  // peer.rails()).
  void PostSenderControlLocked(runtime::SendQueue& peer, int route, wire::FrameKind kind,
                               const runtime::LongKey& key, Tag tag);
  Status OnLongStart(Gid from_process, buffers::SlotRef slot);  // in pair order
  Status OnFragment(int rail, Gid from_process, buffers::SlotRef slot);
  Status OnLongControl(int rail, Gid from_process,
                       buffers::SlotRef slot);  // grant, ack, abort, probe

  // Grants waiting starts when memory or a RecvInto appeared; discards
  // partial messages whose sender went silent. True while starts wait.
  bool LongHousekeeping();
  bool TryGrant(runtime::InboundLong& message, bool library);
  void FinishInbound(runtime::InboundLong& message, Status status, bool tell_sender);
  // Control frames decided under inbound_mu are sent after it is released
  // (resolving a peer takes PeerRoutes' dest_mu and may ask the directory).
  void QueueControlLocked(Gid peer_process, int network, wire::FrameKind kind,
                          const runtime::LongKey& about, uint64_t offset = 0, uint64_t length = 0);
  void FlushControls();
  void FlushAcks();  // the acknowledgements held for the end of the round, and FlushControls
  // Library memory for `message` (counted in reassembly_used), arriving
  // (Take skips it), with one reference for the mailbox and one for us.
  Result<buffers::LargeSlot*> NewMessageSlot(const runtime::InboundLong& message);
  // `bytes` of library memory counted in reassembly_used; freeing it lets
  // waiting starts be granted.
  Result<buffers::LargeSlot*> NewReassemblySlot(uint64_t bytes);
  // Over our network `network` (an index into rails) when it reaches the
  // peer, else its default route.
  void SendToPeer(Gid from_process, int network, wire::FrameKind kind,
                  const runtime::LongKey& about, uint64_t offset = 0, uint64_t length = 0);
  // A RecvInto bound to a long message gave up (ReceiveSide's hook).
  void UnbindPosted(runtime::PostedReceive& post);
  // A process or thread exited (the link's watcher thread): its long
  // messages to us fail, sends to it fail.
  void OnExited(Gid gid, const std::string& reason);
  std::vector<tocl::NetworkStats> Networks() const;

  RuntimeOptions options;  // as the application gave them (Runtime::options())
  Gid process;
  std::unique_ptr<runtime::DirectoryLink> link;
  std::unique_ptr<runtime::EpollReactor> reactor;
  buffers::PoolBudget budget;
  runtime::Rails rails;  // fixed after Open
  std::unique_ptr<runtime::ProgressEngine> progress;
  uint32_t num_classes = 0;
  // The cluster's data-plane secret from the enrollment (none without
  // credentials): networks that connect prove it on every connection.
  security::ClusterKey data_plane_key;
  // Where a gid is looked up (set in Open, after the link).
  std::unique_ptr<runtime::HostDaemons> daemons;

  std::atomic<uint32_t> next_thread{1};
  std::atomic<bool> networks_open{false};  // release/acquire: `rails` is complete
  std::atomic<bool> shutting_down{false};
  std::atomic<bool> shut_down{false};
  // Mailboxes, unexpected memory, the wait policy (receive_side.h).
  runtime::ReceiveSide receive;
  // Requested by Shutdown: ends every WaitForQuery at once (Cancelled).
  std::stop_source query_stop;
  std::mutex shutdown_mu;

  runtime::QueueEvents queue_events{rails};  // before `routes`: each of its queues holds it
  // Destination threads and processes, their send queues and routes, the
  // hosts that are down. After `rails` and `receive`: its queues' frames
  // go back to the rails' pools as it goes.
  runtime::PeerRoutes routes;
  // Checks of a send, the way of a short message (send_side.h).
  runtime::SendSide send_side;

  // Receive order per (source thread, destination thread) pair: the
  // polling thread's (OnFrame, OnLongControl).
  runtime::PairOrder pair_order;

  // Long messages being sent (by their sending threads) and received (the
  // poller's).
  std::mutex outbound_mu;
  std::unordered_map<runtime::LongKey, runtime::LongSend*, runtime::LongKeyHash>
      outbound;           // guarded by outbound_mu
  std::mutex inbound_mu;  // the poller, and RecvInto giving up
  std::unordered_map<runtime::LongKey, std::unique_ptr<runtime::InboundLong>,
                     runtime::LongKeyHash>
      inbound;                                      // guarded by inbound_mu
  std::deque<runtime::InboundLong*> waiting_grant;  // guarded by inbound_mu, FIFO
  struct OutControl {
    Gid peer_process;
    int rail;
    wire::FrameKind kind;
    runtime::LongKey about;
    uint64_t offset;
    uint64_t length;
  };
  std::vector<OutControl> control_outbox;  // guarded by inbound_mu
  std::vector<OutControl> pending_acks;  // guarded by inbound_mu: sent at the end of the poll round
  std::unordered_set<runtime::LongKey, runtime::LongKeyHash> aborted_keys;  // guarded by inbound_mu
  std::deque<runtime::LongKey> aborted_order;                               // guarded by inbound_mu
  std::atomic<uint64_t> reassembly_used{0};
  std::atomic<bool> long_housekeeping{false};                // something to grant or check
  std::chrono::steady_clock::time_point next_partial_check;  // poller only

  Gid parent;  // $TOCL_PARENT
  // Last: they use everything above, and are stopped by Shutdown.
  std::unique_ptr<runtime::Notifier> notifier;
  std::unique_ptr<runtime::ThreadService> spawn_service;
};

}  // namespace tocl
