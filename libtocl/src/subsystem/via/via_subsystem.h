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
// connection request; sends queue in the entry until the VI connects and
// while it has no credits (vi_protocol.h). Receive: the provider completes
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
// A route is broken when one of its VIs breaks (peer gone, protocol error):
// its waiting sends fail, as tcp's do.
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
  size_t max_queued_bytes_per_route = size_t{4} << 20;
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

  std::shared_ptr<ViEntry> EntryFor(Gid peer, uint32_t class_index);
  Status PostLocked(ViEntry& entry, detail::BufferSlot* slot, bool check_room);
  // A new VI (receives posted) for `entry`; null with entry.broken set.
  std::unique_ptr<Vi> NewViLocked(ViEntry& entry, const std::shared_ptr<ViEntry>& shared,
                                  bool initiated, PendingRequest* request);
  void OpenViLocked(ViEntry& entry, const std::shared_ptr<ViEntry>& shared);
  void AddVi(std::unique_ptr<Vi> vi);
  void FlushLocked(ViEntry& entry);
  Status SendLocked(Vi& vi, detail::BufferSlot* slot, uint32_t length, ViMessage kind);
  void SendControlLocked(Vi& vi);
  void RepostLocked(Vi& vi, detail::BufferSlot* same);
  // The close handshake is done: disconnect once our sends are complete.
  void DisconnectWhenDrained(Vi& vi);
  void DisconnectDrained();
  void FailPendingLocked(ViEntry& entry, const Status& why);
  void CompleteSend(detail::BufferSlot* slot, bool ok);
  // Data frames must be frames from the VI's peer to this process.
  Status CheckFrame(const Vi& vi, detail::BufferSlot* slot, uint32_t length) const;

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
  int delivered_ = 0;
  bool closing_ = false;

  std::atomic<uint32_t> owed_total_{0};
  std::atomic<size_t> vi_count_{0};  // vis_.size()
  std::atomic<uint64_t> vis_opened_{0};
  std::atomic<uint64_t> vis_closed_{0};
  std::atomic<bool> stop_{false};
  std::thread connection_manager_;
};

}  // namespace tocl::subsystem::via
