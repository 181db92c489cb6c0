// One VI of the ibverbs provider: an RC queue pair on an rdma_cm id, its
// send and receive work completing on the provider's shared CQ.
//
// The device keeps VIA's rules itself: receives complete in the order
// posted; a message larger than the head receive completes it with
// IBV_WC_LOC_LEN_ERR and moves the QP to the error state. Every work
// request is signalled, so each descriptor completes exactly once: with
// its result, or flushed (IBV_WC_WR_FLUSH_ERR) once the QP is in the error
// state. The VI reports OnClosed when it is broken and nothing it posted is
// left on the QP.
//
// Active side: ConnectRequest creates the id on the provider's active
// channel and resolves the address; the polling thread takes it on (route,
// QP, the receives posted so far, rdma_connect) as the events come.
// Passive side: Adopt creates the QP on the request's id; Accept answers.
//
// Threading: mu_ guards the state and the descriptor FIFOs. Posting goes
// to the QP under mu_. Completions and the active side's cm events arrive
// on the polling thread, which reports to the handler after unlocking.
// Break may come from any thread (a disconnect the connection manager
// saw); the polling thread finishes the VI (VerbsProvider::ScheduleFinish).
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

#include "subsystem/via/provider.h"

namespace tocl::subsystem::via {

class VerbsProvider;
struct CmEvent;

class VerbsVi final : public ProviderVi {
 public:
  // Work requests per QP. Receives posted per VI are at most the
  // subsystem's largest window (256, vi_protocol.h); sends are bounded by
  // the peer's window (credits) plus a few control messages.
  static constexpr uint32_t kMaxSendWr = 272;
  static constexpr uint32_t kMaxRecvWr = 272;
  // IB transport and RNR retries. 7 is "retry forever" for RNR: a message
  // that finds no receive posted waits for one instead of breaking the VI
  // (the subsystem's credits make sure it does not happen).
  static constexpr uint8_t kRetryCount = 7;
  static constexpr uint8_t kRnrRetryCount = 7;

  VerbsVi(VerbsProvider& owner, void* context);
  // Destroys the QP and the id. The handler destroys a VI only after
  // OnClosed, or one that never got a descriptor.
  ~VerbsVi() override;
  VerbsVi(const VerbsVi&) = delete;
  VerbsVi& operator=(const VerbsVi&) = delete;

  Status ConnectRequest(std::string_view address, const ConnectData& data) override;
  Status PostSend(const Descriptor& descriptor, bool* done_now) override;
  Status PostRecv(const Descriptor& descriptor) override;
  void Disconnect(std::string_view why) override;

  // Connection-manager thread: takes over the id of a connection request
  // and creates the QP on it (receives can be posted from then on). On
  // failure the id stays the caller's.
  Status Adopt(rdma_cm_id* id, std::string peer);
  // Connection-manager thread: rdma_accept with `reply`.
  Status Accept(const ConnectData& reply);
  rdma_cm_id* id();

  // Polling thread:
  void OnCompletion(const ibv_wc& wc);
  // An event of the active side's id (already acked). Returns 1 when it
  // reported OnConnected.
  int OnActiveEvent(const CmEvent& event);
  // Reports OnClosed once nothing is left on the QP (the receives never
  // posted to it complete with errors first). Returns whether it did.
  bool Finish();
  // Close() when the flushes did not come in time: completes everything
  // left with errors and reports OnClosed.
  void ForceFinish();
  bool closed();

  // Any thread: the VI is broken for good (idempotent): the QP goes to the
  // error state and flushes what is posted.
  void Break(Status why);

 private:
  enum class State {
    kIdle,        // active side before ConnectRequest
    kResolving,   // active: address and route
    kConnecting,  // active: rdma_connect sent; passive: QP made, not accepted yet
    kConnected,
    kBroken,  // waiting for the flushes
    kClosed,  // OnClosed reported
  };

  void BreakLocked(Status why);
  // Creates the QP on id_ and posts the receives queued so far.
  Status CreateQpLocked();
  Status PostRecvLocked(const Descriptor& descriptor);
  void ScheduleFinishLocked();
  bool DrainedLocked() const { return sends_.empty() && posted_recvs_ == 0; }
  int OnRouteResolved();
  int OnEstablished(const CmEvent& event);

  VerbsProvider& owner_;
  void* const context_;

  std::mutex mu_;
  // Guarded by mu_:
  State state_ = State::kIdle;
  Status why_;
  std::string peer_;          // for messages
  rdma_cm_id* id_ = nullptr;  // owned from ConnectRequest / Adopt on
  bool passive_ = false;
  ibv_qp* qp_ = nullptr;       // id_->qp once created
  bool connect_sent_ = false;  // rdma_connect / rdma_accept done: disconnect on break
  bool finish_scheduled_ = false;
  std::array<std::byte, ConnectData::kBytes> request_data_{};
  // Posted sends, in order (each one on the QP).
  std::deque<detail::BufferSlot*> sends_;
  // Receive descriptors in order; the first posted_recvs_ are on the QP,
  // the rest wait for it to exist.
  std::deque<Descriptor> recvs_;
  size_t posted_recvs_ = 0;
};

// What an error completion means for VIA: a receive's IBV_WC_LOC_LEN_ERR
// is VIA's length error (`capacity` is the posted buffer's), the others
// say how the VI broke. `peer` names the other end in the message.
Status CompletionError(const ibv_wc& wc, bool receive, uint32_t capacity, const std::string& peer);

}  // namespace tocl::subsystem::via
