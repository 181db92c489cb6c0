// Runtime::Impl: the pieces of a process's runtime and how they meet. Each
// piece is a type of its own that sees only what it is given (callbacks, a
// small Events interface, the parts it works on), never Impl; Impl owns
// them, wires them together in Open and takes them down in Shutdown. So
// only runtime.cc includes this header. The Events a part needs of the
// others are small adapters (QueueEvents in queue_events.h;
// LongReceiverEvents and LongSenderEvents here): each part is tested
// without a daemon, and none grows into the runtime's state.
//
//   Send ──> SendSide (send_side.h: checks; local mailbox, or)
//        ──> PeerRoutes (peer_routes.h: the destination thread, the
//            SendQueue of its process, its routes chosen from the directory)
//        ──> SendQueue (send_queue.h: FIFO queue, seq per thread pair) ──> Route of a Rail
//            (frames that wait are retried by the poller: QueueEvents)
//   Send (long) ──> LongSender (long_sender.h): fragments over every Rail that reaches
//                   the peer (fragment_scheduler.h), posted through its SendQueue
//   Rail's Subsystem ──> RailSink ──> OnFrame ──> ReceiveLanes (receive_lanes.h) ──> ReceiveSide
//                                       │          └─ long starts ──> LongReceiver
//                                       ├──> fragments, a sender's control ──> LongReceiver
//                                       │    (long_receiver.h)
//                                       └──> a receiver's answers ──> LongSender
//   Recv ──> ReceiveSide (receive_side.h): the thread's Mailbox, polling
//            through the ProgressEngine while it waits
//   RegisterHandler ──> HandlerDispatch (handler_dispatch.h): a standing
//            PostedReceive on the thread's Mailbox claims messages; the
//            dispatch's pool runs the calls
//   BeginPacked, RecvPacked, RegisterPackedHandler (runtime_packed.cc) ──>
//            PackedWriter (packed_writer.cc: segments through SendSide,
//            by-reference ranges through SendLong, flagged as pieces) and
//            PackedReader (packed_reader.cc: pieces by piece selectors,
//            long ones into posted receives; ExitedSenders ends its waits)
//   Irecv, IrecvInto ──> a PostedReceive on the thread's Mailbox
//            (posted_receive.h), completed by the delivery path; Isend
//            (long) ──> BackgroundSends (background_sends.h): LongSender's
//            steps on one thread; Request (request.cc) waits through
//            ReceiveSide
//   Multicast ──> MulticastService (multicast_service.h): a marker in
//            each remote receiver's pair (SendSide::PostMarker), requests
//            to relays; a relay's service thread (and the sender's
//            fallback) ──> SendFill (SendSide, LongSender, or the pair
//            order of its own receivers)
//   Directory: DirectoryLink (our daemon: enrollment, registrations, the
//            change stream) ──> OnExited, ApplyClusterChange (cluster_events.h)
//            ──> PeerRoutes, ThreadService, Notifier; HostDaemons
//            (host_daemons.h) answers lookups; each membership watch
//            (membership/) follows a change stream of its own
//
// A Rail is one open network: one subsystem instance (a process may have
// several tcp networks, one per NIC); Rails (rails.h) holds them, and a
// rail's index is what routes and statistics call a network.
//
// Locks, in the order they are taken: PeerRoutes' dest_mu ──>
// SendQueue::mu() ──> a SendQueue lane's lock (send_queue.h; a copying send
// of a short message often takes it alone) ──> QueueEvents' waiting_mu
// (Queued), LongSender's table (a long send's start is registered under
// the lane's lock); and under mu(): a LongSend's mu, PeerRoutes' hosts_mu
// and directory lookups. The LongReceiver's lock is never held while a peer is resolved:
// the control frames it decides are queued and sent once it is released.
//
// Member order is destruction order reversed: the reactor outlives the
// subsystems (their fds), the subsystems (their pools) outlive the
// mailboxes and peers that hold buffers.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <vector>

#include "buffers/buffer_pool.h"
#include "buffers/slot_ref.h"
#include "runtime/background_sends.h"
#include "runtime/directory_link.h"
#include "runtime/epoll_reactor.h"
#include "runtime/exited_senders.h"
#include "runtime/host_daemons.h"
#include "runtime/internal_threads.h"
#include "runtime/long_message.h"
#include "runtime/long_receiver.h"
#include "runtime/long_sender.h"
#include "runtime/mailbox.h"
#include "runtime/peer_routes.h"
#include "runtime/progress_engine.h"
#include "runtime/queue_events.h"
#include "runtime/rails.h"
#include "runtime/receive_lanes.h"
#include "runtime/receive_side.h"
#include "runtime/reply_mailboxes.h"
#include "runtime/runtime_options.h"
#include "runtime/send_queue.h"
#include "runtime/send_side.h"
#include "security/cluster_key.h"
#include "subsystem/subsystem.h"
#include "subsystem/transport_registry.h"
#include "tocl/runtime.h"

namespace tocl::runtime {
class HandlerDispatch;
class MembershipWatches;
class MulticastService;
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
  void OnRouteDown(Gid peer_process) override;
  bool TryEnterLane(uint32_t lane) override;
  void EnterLane(uint32_t lane) override;
  void LeaveLane(uint32_t lane) override;

 private:
  Runtime::Impl& impl_;
  const int rail_;
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
  Status ResolveLocked(runtime::SendQueue& peer, std::unique_lock<std::mutex>& lock) override;
  std::string NetworkName(int network) const override;
  void NetworkFailed(int network) override;
  void ListenForBells(bool on) override;

 private:
  Runtime::Impl& impl_;
};

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
  // InvalidArgument for a marker or relayed frame (wire/frame.h) naming
  // one of the runtime's internal threads, or a relayed abort or probe
  // going the other way than its tag says (the frame's connection closes).
  Status CheckFill(Gid from_process, const wire::Header& header) const;
  bool Congested() const { return receive.Congested(); }

  // --- threads ---
  // Numbers and enrolls a thread (EnrollThread without the public checks).
  Result<Gid> EnrollThread(std::string name, Attributes attributes);
  // The thread leaves (idempotent): its mailbox, its directory entry, its
  // notification watches.
  void LeaveThread(Gid thread);
  size_t ShortMaxPayload() const;

  // --- long messages (long_sender.h, long_receiver.h) ---
  // A message over the short maximum: whole into a local thread's mailbox,
  // or by long_sender to another process.
  // `flags`: the start's wire flags (wire::kFlagPackedPiece for a packed
  // message's piece).
  Status SendLong(Gid from, Gid to, Tag tag, std::span<const std::byte> payload,
                  uint16_t flags = 0);
  // A multicast's fill (wire/frame.h): `payload` to `to` as number
  // `fill.seq` of the (from, to) pair, with the nonce of the marker
  // `from`'s process posted; `from`
  // is a thread of this process (the sender's fallback) or of the process
  // this one relays for. Into `to`'s pair order here when it is this
  // process's; else short by SendSide::SendFill, long by
  // LongSender::SendFill (waking `wake`).
  Status SendFill(Gid from, Gid to, Tag tag, std::span<const std::byte> payload,
                  runtime::FillOf fill, runtime::Mailbox& wake);

  // A process or thread exited (the link's watcher thread): its long
  // messages to us fail, sends to it fail.
  void OnExited(Gid gid, const std::string& reason);
  // Exit ordering (Notify; the notification thread, before a notice of an
  // exit): what the process of `gone` sent that has reached us is handed to
  // its receivers, whatever the receive side's congestion; for a process
  // that exited, up to the end of its tcp connections (for at most
  // kDrainGoneFor), and a long message of it still incomplete then fails.
  void DeliverArrivedFrom(Gid gone, const std::string& reason);
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
  // Packed messages (tocl/packed_message.h): each writer's stream id (its
  // pieces' tag), and the senders that exited, which their readers ask.
  std::atomic<uint32_t> next_packed_stream{1};
  runtime::ExitedSenders exited_senders;
  std::atomic<bool> networks_open{false};  // release/acquire: `rails` is complete
  std::atomic<bool> shutting_down{false};
  std::atomic<bool> shut_down{false};
  // Mailboxes, unexpected memory, the wait policy (receive_side.h).
  runtime::ReceiveSide receive;
  // Requested by Shutdown: ends every WaitForQuery at once (Cancelled).
  std::stop_source query_stop;
  // What DeliverArrivedFrom waits for the poll token on (nobody delivers
  // to it; the token's holder wakes it).
  runtime::Mailbox drain_waiter{Gid()};
  std::mutex shutdown_mu;

  runtime::QueueEvents queue_events{rails};  // before `routes`: each of its queues holds it
  // Destination threads and processes, their send queues and routes, the
  // hosts that are down. After `rails` and `receive`: its queues' frames
  // go back to the rails' pools as it goes.
  runtime::PeerRoutes routes;
  // Checks of a send, the way of a short message (send_side.h).
  runtime::SendSide send_side;

  // Receive order per (source thread, destination thread) pair, in the
  // lanes of the receiving threads (OnFrame, long_receiver's skips); the
  // lanes' locks are the subsystems' (RailSink).
  runtime::ReceiveLanes lanes;

  // Long messages being received (the poller's) and sent (by their sending
  // threads); each after the events it holds, and after `receive`.
  LongReceiverEvents long_receiver_events{*this};
  runtime::LongReceiver long_receiver;
  LongSenderEvents long_sender_events{*this};
  runtime::LongSender long_sender;
  // Long Isends, carried by one thread (stopped by Shutdown).
  runtime::BackgroundSends background_sends{long_sender, receive};

  Gid parent;  // $TOCL_PARENT
  // Last: they use everything above, and are stopped by Shutdown.
  std::unique_ptr<runtime::Notifier> notifier;
  // Where internal calls (SpawnThread, multicasts) wait for replies.
  std::unique_ptr<runtime::ReplyMailboxes> reply_mailboxes;
  std::unique_ptr<runtime::ThreadService> spawn_service;
  // Runtime::Multicast, and this process's relay (multicast_service.h).
  std::unique_ptr<runtime::MulticastService> multicasts;
  // Runtime::WatchMembers (membership/membership_watches.h).
  std::unique_ptr<runtime::MembershipWatches> memberships;
  // Message handlers (handler_dispatch.h): first to go, their calls use
  // everything else.
  std::unique_ptr<runtime::HandlerDispatch> handlers;
};

}  // namespace tocl
