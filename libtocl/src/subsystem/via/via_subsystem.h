// The via subsystem (DESIGN.md §5, the ToCL paper's §4.2 and Fig. 2): a
// connection-oriented network whose receive descriptors are consumed in
// FIFO order, so messages of different sizes travel on different
// connections: one VI per (remote process, size class), created on the
// first send of that class to that process and kept.
//
//   auto via = ViaSubsystem::Open({.self_process = me, .num_classes = 9},
//                                 reactor, sink, budget);
//   publish((*via)->address());            // "sockets:127.0.0.1:41234"
//   auto route = (*via)->Connect(peer, "sockets:127.0.0.1:40000");
//   (*route)->Post(slot);                  // the VI of the frame's class
//
// Send: the frame's class (by its length) picks the entry; the first send
// creates the VI, posts its receive descriptors from the pool and sends the
// connection request; frames wait in the entry's window until the VI
// connects and while it has no credits (vi_protocol.h), and stay there until
// the peer acknowledges them. Receive: the provider completes
// descriptors in order; a data message goes to the sink as it lies in its
// buffer (no copy) and a fresh buffer is posted in its place, unless the
// sink is congested or the pool at its cap: then the descriptor is owed,
// the peer runs out of credits, and nothing is lost.
//
// Connection manager: one thread per process waits for requests
// (ConnectWait), creates the VI, posts its descriptors and accepts. When two
// processes connect to each other in one class at the same moment, the
// request of the lower process id wins; the other is rejected ("crossed")
// and its sends go on the winner's VI.
//
// Cap: at most max_vis VIs per process. Past it, the least recently used
// are closed with a handshake that loses nothing (vi_protocol.h); a later
// send reconnects.
//
// Nothing lost (stream_pair.h): a frame stays in its entry's window until
// the peer acknowledges it (kSent only then). A VI that breaks while the
// peer lives is made again, at once and then with backoff, and resends what
// the peer lacks; the route is Down() meanwhile and the runtime may take
// the frames to another network (TakeUnacknowledged). It breaks for good
// (its frames kFailed) after unreachable_timeout without a VI, on a
// protocol error, when the peer refuses it, or by Abandon.
//
// Threading: as subsystem.h says; the connection manager is the one extra
// thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "buffers/buffer_pool.h"
#include "subsystem/reactor.h"
#include "subsystem/subsystem.h"
#include "subsystem/via/provider.h"
#include "subsystem/via/vi.h"
#include "subsystem/via/vi_protocol.h"
#include "tocl/network_stats.h"

namespace tocl::subsystem::via {

// A via address, "PROVIDER:REST": what a process publishes
// ("sockets:10.0.0.1:4000/24") and what Connect takes
// ("sockets:10.0.0.1:4000"). The views point into the address.
struct ProviderAddress {
  std::string_view provider;  // "sockets", "ibverbs"
  std::string_view rest;      // what follows the first ':'
};
// nullopt without a ':' or with nothing before it.
std::optional<ProviderAddress> SplitAddress(std::string_view address);

struct ViaOptions {
  Gid self_process;
  std::string bind_address = "127.0.0.1";
  uint32_t num_classes = 0;
  // "sockets", "ibverbs", or "auto": ibverbs when a device is present.
  std::string provider = "auto";
  size_t max_vis = 1024;
  // Frames posted and not acknowledged per (peer, class) before Post says
  // TryAgain.
  size_t max_queued_bytes_per_route = size_t{4} << 20;
  // How long a (peer, class) whose VI broke may go without one before its
  // frames fail (RuntimeOptions::unreachable_timeout).
  std::chrono::milliseconds unreachable_timeout{30000};
  // The cluster's data-plane secret (none without credentials).
  security::ClusterKey key{};
  // Tests only: post data without credits (to show the provider's rule).
  bool ignore_credits = false;
};

class ViaSubsystem final : public Subsystem, private CompletionHandler {
 public:
  static Result<std::unique_ptr<ViaSubsystem>> Open(const ViaOptions& options, Reactor& reactor,
                                                    Sink& sink, buffers::PoolBudget& budget);
  ~ViaSubsystem() override;
  ViaSubsystem(const ViaSubsystem&) = delete;
  ViaSubsystem& operator=(const ViaSubsystem&) = delete;

  Network network() const override { return Network::kVia; }
  // "PROVIDER:IP:PORT".
  const std::string& address() const override { return address_; }
  buffers::BufferPool& pool() override { return *pool_; }
  // An address of our provider's kind.
  bool Reaches(Gid peer_process, std::string_view address) const override;
  Result<std::unique_ptr<Route>> Connect(Gid peer_process, std::string_view address) override;
  int Poll() override;
  bool PrepareToSleep() override;
  void FinishSleep() override {}
  void Housekeeping() override;
  std::chrono::steady_clock::time_point WakeBy() override;
  void Close() override;

  std::string_view provider_name() const { return provider_->name(); }
  uint32_t max_payload() const { return limits_.max_payload; }
  size_t max_vis() const { return options_.max_vis; }
  // The VI pool now, most recently used first.
  std::vector<ViStats> ViPool() const;
  // A VI's socket or completion events come through the reactor.
  bool WantsReactorEachRound() const override {
    return vi_count_.load(std::memory_order_relaxed) > 0;
  }
  uint64_t vis_opened() const { return vis_opened_.load(std::memory_order_relaxed); }
  uint64_t vis_closed() const { return vis_closed_.load(std::memory_order_relaxed); }
  // VIs lost while their peer lived, and made again.
  uint64_t vis_lost() const { return vis_lost_.load(std::memory_order_relaxed); }
  uint64_t vis_restored() const { return vis_restored_.load(std::memory_order_relaxed); }
  // Frames that arrived twice (on a VI and on the one that replaced it),
  // dropped.
  uint64_t duplicates() const { return duplicates_.load(std::memory_order_relaxed); }
  // VIs not closed yet (any thread).
  size_t open_vis() const;

  // Tests only: posts `slot` on the VI of `class_index` instead of the
  // frame's class (a sender that breaks VIA's rule).
  Status PostOnClass(Route& route, detail::BufferSlot* slot, uint32_t class_index);

 private:
  class ViaRoute;

  ViaSubsystem(const ViaOptions& options, Reactor& reactor, Sink& sink);
  Status Start(buffers::PoolBudget& budget);

  // CompletionHandler:
  void OnSendDone(void* vi, detail::BufferSlot* slot, const Status& status) override;
  void OnRecvDone(void* vi, detail::BufferSlot* slot, uint32_t length, uint32_t immediate,
                  const Status& status) override;
  void OnConnected(void* vi, const ConnectData& peer) override;
  void OnClosed(void* vi, const Status& why) override;
  void OnConnectedLocked(Vi& vi, const ConnectData& peer);
  // A message that completed on a connected VI: credits, acknowledgements,
  // then its kind's work (a data frame goes to the sink with `lock` let go).
  void ReceiveLocked(std::unique_lock<std::mutex>& lock, Vi& vi, detail::BufferSlot* slot,
                     uint32_t length, uint32_t immediate);

  std::shared_ptr<ViEntry> EntryFor(Gid peer, uint32_t class_index);
  std::vector<std::shared_ptr<ViEntry>> SnapshotEntries() const;
  Status PostLocked(ViEntry& entry, detail::BufferSlot* slot, bool check_room);
  // A new VI (receives posted) for `entry`; null when the provider cannot
  // make one.
  std::unique_ptr<Vi> NewViLocked(ViEntry& entry, const std::shared_ptr<ViEntry>& shared,
                                  bool initiated, PendingRequest* request);
  void OpenViLocked(ViEntry& entry);
  // Opens a VI when the entry has frames no VI carries and may try now.
  void OpenIfDueLocked(ViEntry& entry);
  void AddVi(std::unique_ptr<Vi> vi);
  void FlushLocked(ViEntry& entry);
  // A frame of the window on `vi`, with a reference for the provider (or
  // copied into a registered buffer). TryAgain: no buffer to copy into.
  Status SendFrameLocked(Vi& vi, detail::BufferSlot* slot, uint32_t length);
  Status SendLocked(Vi& vi, detail::BufferSlot* slot, uint32_t length, ViMessage kind);
  void SendControlLocked(Vi& vi);
  // A credit message for owed acknowledgements, when credits allow.
  void SendAckLocked(Vi& vi);
  void NoteAckOwedLocked(Vi& vi);
  void ClearAckOwedLocked(Vi& vi);
  void RepostLocked(Vi& vi, detail::BufferSlot* same);
  // The close handshake is done: disconnect once our sends are complete.
  void DisconnectWhenDrained(Vi& vi);
  void DisconnectDrained();
  // The provider is done with a slot it sent: its reference goes.
  void ReleaseSent(detail::BufferSlot* slot);
  // Data frames must be frames from the VI's peer to this process.
  Status CheckFrame(const Vi& vi, detail::BufferSlot* slot, uint32_t length) const;

  // --- the streams across VIs ---
  // `vi` connected: where its streams resume (StreamPair::Agree, from
  // `ours` and `theirs`), recorded on it (NumberLocked).
  Result<StreamPair::Resume> AgreeLocked(ViEntry& entry, Vi& vi, const ConnectData& ours,
                                         const ConnectData& theirs);
  void NumberLocked(ViEntry& entry, Vi& vi, const StreamPair::Resume& resume);
  // The entry's VIs (but `keep`) that carry the peer's stream
  // `peer_stream`, which another replaced, are disconnected.
  void DropStreamLocked(ViEntry& entry, const Vi& keep, uint64_t peer_stream);
  // `vi` is the entry's VI: acknowledges what the peer has and sends the
  // rest from there.
  void ResumeLocked(ViEntry& entry, Vi& vi, const StreamPair::Resume& resume);
  // The peer acknowledged `low` (vi_protocol.h) frames on `vi`.
  Status AcknowledgeLocked(ViEntry& entry, Vi& vi, uint32_t low);
  // The entry's VI was lost while the peer may live: down, connecting
  // again, while frames wait; idle otherwise.
  void LoseLocked(ViEntry& entry, const Status& why);
  // The entry is no longer down (connected again, idle, or broken).
  void SetUpLocked(ViEntry& entry);
  // Its window is empty (acknowledged, failed with its route, taken by
  // another network): not down, nothing to report, and the next Post
  // connects at once. Every way a down entry's window empties ends here or
  // in ResumeLocked or BreakLocked, so that down implies frames wait.
  void IdleLocked(ViEntry& entry);
  // Broken for good: its frames fail, its VI goes, Post refuses.
  void BreakLocked(ViEntry& entry, const Status& why, bool warn);
  // The peer broke the protocol on `vi`: the entry breaks and the peer's
  // stream is refused.
  void RefuseLocked(ViEntry& entry, Vi& vi, const std::string& why);
  // The entry's VI leaves it (and is disconnected, quietly).
  void DropViLocked(ViEntry& entry, std::string_view why);
  // TakeUnacknowledged for one entry.
  std::vector<detail::BufferSlot*> TakeLocked(ViEntry& entry);
  // Timers of every entry (reconnects, unreachable_timeout); the earliest next.
  std::chrono::steady_clock::time_point Tick(std::chrono::steady_clock::time_point now);
  // Owed acknowledgements due at `now` (time_point::max(): all) are sent.
  void SendAcks(std::chrono::steady_clock::time_point now);
  void ReportRoutesDown();
  void FlushBlocked();

  void ServeConnections();
  void HandleRequest(PendingRequest& request);
  bool RepostOwed();
  void CloseOverCap();
  void FreeClosed();
  std::vector<std::shared_ptr<Vi>> SnapshotVis() const;

  const ViaOptions options_;
  Reactor& reactor_;
  Sink& sink_;
  const wire::Limits limits_;
  std::unique_ptr<Provider> provider_;
  std::unique_ptr<buffers::BufferPool> pool_;  // after provider_: its slabs are the provider's
  std::string address_;
  // What control messages are sent from: no bytes, never in a pool.
  detail::BufferSlot control_slot_;

  mutable std::mutex entries_mu_;
  std::unordered_map<uint64_t, std::shared_ptr<ViEntry>> entries_;  // guarded

  mutable std::mutex vis_mu_;
  std::vector<std::shared_ptr<Vi>> vis_;  // guarded; every VI not freed yet

  // Polling thread only:
  std::vector<Vi*> closed_;    // reported closed, freed by the next FreeClosed
  std::vector<Vi*> draining_;  // to disconnect once nothing is in flight
  // VIs that owe the peer an acknowledgement (Vi::ack_owed), so that the
  // poller's timer looks at them and not at every VI. Taken under an
  // entry's lock.
  std::mutex owing_mu_;
  std::vector<Vi*> owing_;       // guarded by owing_mu_
  std::vector<Vi*> owing_seen_;  // polling thread: SendAcks' copy (no allocation each time)
  int delivered_ = 0;
  bool closing_ = false;
  uint32_t poll_rounds_ = 0;

  std::atomic<uint32_t> owed_total_{0};
  // VIs that owe the peer an acknowledgement; entries down; an entry lost
  // a VI since the runtime was last told; a flush found no registered buffer.
  std::atomic<uint32_t> acks_owed_{0};
  std::atomic<uint32_t> down_count_{0};
  std::atomic<bool> route_went_down_{false};
  std::atomic<bool> flush_blocked_{false};
  std::atomic<uint64_t> vis_lost_{0};
  std::atomic<uint64_t> vis_restored_{0};
  std::atomic<uint64_t> duplicates_{0};
  std::atomic<size_t> vi_count_{0};  // vis_.size()
  std::atomic<uint64_t> vis_opened_{0};
  std::atomic<uint64_t> vis_closed_{0};
  std::atomic<bool> stop_{false};
  std::thread connection_manager_;
};

}  // namespace tocl::subsystem::via
