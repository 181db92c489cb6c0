// The ibverbs provider: VIA over RDMA (RC queue pairs), connections set up
// with librdmacm. See README.md in this folder.
//
//   passive channel  the listening id and the ids of accepted requests;
//                    read only by ConnectWait (connection-manager thread)
//   active channel   the ids of our own requests; read on the polling
//                    thread (Poll and its reactor fd)
//   one PD, one CQ   every QP's sends and receives complete on the CQ; its
//                    completion channel's fd is in the reactor
//   slab memory      registered once per slab with the PD (verbs_memory.h)
//
// Completions find their VI by QP number; cm events by id.
//
// Locking: mu_ (the VI registry) may be held while taking a VI's mutex;
// qp_mu_ and finish_mu_ are leaves, taken under a VI's mutex. The handler
// is never called with any of them held.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/posix.h"
#include "subsystem/tcp/socket.h"
#include "subsystem/via/ibverbs/verbs_handles.h"
#include "subsystem/via/ibverbs/verbs_memory.h"
#include "subsystem/via/provider.h"

namespace tocl::subsystem::via {

class VerbsVi;

// What a cm event says, copied so that the event can be acked at once
// (an id cannot be destroyed while an event of it is unacked).
struct CmEvent {
  rdma_cm_event_type type = RDMA_CM_EVENT_ADDR_ERROR;
  int status = 0;
  rdma_cm_id* id = nullptr;  // CONNECT_REQUEST: the new id
  std::vector<std::byte> private_data;
};

class VerbsProvider final : public Provider {
 public:
  static constexpr int kResolveTimeoutMs = 2000;
  static constexpr int kListenBacklog = 128;
  // CQ entries (at most the device's max_cqe). A VI keeps up to 256
  // receives posted (vi_protocol.h) and as many sends in flight, so this
  // holds about 500 VIs with full windows both ways, 16 MiB of CQEs. Work
  // requests in flight over all VIs are held below it: an overrun would
  // break the CQ of every VI.
  static constexpr int kCqEntries = 262144;
  // Completions polled per ibv_poll_cq call, and calls per Poll (so one
  // busy network does not starve the others).
  static constexpr int kPollBatch = 32;
  static constexpr int kMaxBatchesPerPoll = 16;
  // How long Close waits for the flushes before completing what is left.
  static constexpr std::chrono::seconds kCloseTimeout{2};
  // The reject's private data: this tag, then the reason (IB carries 148
  // bytes in a REJ).
  static constexpr std::string_view kRejectTag = "TVIR";
  static constexpr size_t kMaxRejectBytes = 140;

  VerbsProvider(const ProviderOptions& options, Reactor& reactor, CompletionHandler& handler);
  ~VerbsProvider() override;
  VerbsProvider(const VerbsProvider&) = delete;
  VerbsProvider& operator=(const VerbsProvider&) = delete;

  Status Open();

  std::string_view name() const override { return "ibverbs"; }
  const std::string& address() const override { return address_; }
  bool needs_registered_memory() const override { return true; }
  buffers::SlabMemory& slab_memory() override { return *memory_; }

  Result<std::unique_ptr<ProviderVi>> CreateVi(void* context, PendingRequest* request) override;
  Result<std::unique_ptr<PendingRequest>> ConnectWait(
      std::chrono::steady_clock::time_point deadline) override;
  Status ConnectAccept(PendingRequest& request, ProviderVi& vi, const ConnectData& reply) override;
  void ConnectReject(PendingRequest& request, std::string_view reason) override;
  void InterruptWait() override;

  int Poll() override;
  bool PrepareToSleep() override;
  void Close() override;

  // For the VIs:
  CompletionHandler& handler() { return handler_; }
  uint32_t num_classes() const { return options_.num_classes; }
  const tcp::SocketAddress& bind_address() const { return bind_address_; }
  ibv_pd* pd() const { return pd_.get(); }
  ibv_cq* cq() const { return cq_.get(); }
  rdma_event_channel* active_channel() const { return active_channel_.get(); }
  // Where events of `id` and completions of `qp_num` go.
  void AddId(rdma_cm_id* id, VerbsVi* vi, bool active);
  void AddQp(uint32_t qp_num, VerbsVi* vi);
  void ForgetQp(uint32_t qp_num);
  // The VI is being destroyed: nothing may reach it any more.
  void Forget(VerbsVi* vi, rdma_cm_id* id, bool active);
  // The VI is broken and drained: the polling thread finishes it.
  void ScheduleFinish(VerbsVi* vi);
  // Room on the CQ for `count` more work requests (false: none), and
  // giving it back as they complete.
  bool ReserveCqes(uint32_t count);
  void ReleaseCqes(uint32_t count);

 private:
  // Reactor fds: both just make the polling thread poll.
  class ReadyHandler final : public FdHandler {
   public:
    ReadyHandler(VerbsProvider& owner, bool completions)
        : owner_(owner), completions_(completions) {}
    void OnReady(uint32_t events) override;

   private:
    VerbsProvider& owner_;
    const bool completions_;
  };

  // Takes and acks what the completion channel holds (the CQ was armed and
  // fired); the completions themselves are polled from the CQ.
  void AckCompletionEvents();
  int PollCq();
  int PollActiveChannel();
  int DeliverFinishes();
  // Connection-manager thread: one passive-side event; a request to hand
  // over, or null.
  std::unique_ptr<PendingRequest> OnPassiveEvent(CmEvent& event);
  bool AllClosed();

  const ProviderOptions options_;
  Reactor& reactor_;
  CompletionHandler& handler_;
  tcp::SocketAddress bind_address_;
  std::string address_;
  Fd interrupt_fd_;  // an eventfd that ends ConnectWait

  // In setup order; destroyed in reverse. The PD, CQ and channel live on
  // the listening id's device context, which librdmacm keeps open while an
  // id is on it: they go before listen_id_. The slab memory's regions go
  // before the PD.
  verbs::EventChannel passive_channel_;
  verbs::CmId listen_id_;
  verbs::ProtectionDomain pd_;
  std::unique_ptr<verbs::RegisteredSlabMemory> memory_;
  verbs::CompChannel comp_channel_;
  verbs::CompletionQueue cq_;
  verbs::EventChannel active_channel_;

  ReadyHandler completions_ready_{*this, true};
  ReadyHandler active_ready_{*this, false};
  bool completions_registered_ = false;
  bool active_registered_ = false;

  uint32_t cq_capacity_ = 0;
  std::atomic<uint32_t> cq_reserved_{0};  // relaxed: a counter, no data hangs on it
  std::atomic<int> active_ids_{0};        // ids on the active channel (Poll reads it only then)
  bool cq_broken_logged_ = false;         // polling thread only

  std::mutex mu_;
  // Guarded by mu_:
  std::unordered_set<VerbsVi*> vis_;
  std::unordered_map<rdma_cm_id*, VerbsVi*> by_id_;
  bool closed_ = false;

  std::mutex qp_mu_;
  std::unordered_map<uint32_t, VerbsVi*> by_qp_;  // guarded by qp_mu_

  std::mutex finish_mu_;
  std::vector<VerbsVi*> to_finish_;  // guarded by finish_mu_
};

// The next event on a non-blocking channel, acked; nullopt when there is
// none.
Result<std::optional<CmEvent>> NextCmEvent(rdma_event_channel* channel);

// A reject's private data (VerbsProvider::ConnectReject): kRejectTag, then
// the reason, cut to fit. And the reason read back from a REJECTED event's
// private data, or a description of rdma_cm's `status` when the data is not
// ours (nothing listens there, the peer's CM refused).
// HasRejectReason: the data is ours (a refusal by our peer, not its CM's).
std::vector<std::byte> EncodeRejectData(std::string_view reason);
bool HasRejectReason(std::span<const std::byte> data);
std::string DecodeRejectReason(std::span<const std::byte> data, int status);

}  // namespace tocl::subsystem::via
