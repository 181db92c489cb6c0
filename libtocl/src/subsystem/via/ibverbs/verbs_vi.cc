#include "subsystem/via/ibverbs/verbs_vi.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/logger.h"
#include "subsystem/tcp/socket.h"
#include "subsystem/via/ibverbs/verbs_provider.h"
#include "subsystem/via/vi_protocol.h"

namespace tocl::subsystem::via {

// A VI's work queues hold the largest window the subsystem posts, and the
// peer's window of sends plus the control messages.
static_assert(VerbsVi::kMaxRecvWr >= DescriptorsPerVi(0) &&
              VerbsVi::kMaxSendWr >= DescriptorsPerVi(0) + kReserve);

namespace {

// wr_id is the slot's address; its low bit says "receive", because an
// error completion's opcode is undefined (ibv_poll_cq(3)).
constexpr uint64_t kRecvTag = 1;
static_assert(alignof(detail::BufferSlot) >= 2);

uint64_t WrId(detail::BufferSlot* slot, bool receive) {
  return reinterpret_cast<uintptr_t>(slot) | (receive ? kRecvTag : 0);
}

}  // namespace

Status CompletionError(const ibv_wc& wc, bool receive, uint32_t capacity, const std::string& peer) {
  switch (wc.status) {
    case IBV_WC_LOC_LEN_ERR:
      if (receive) {
        return InvalidArgument(
            fmt::format("a message from {} is larger than the posted receive buffer of {} bytes "
                        "(VIA length error: the VI breaks)",
                        peer, capacity));
      }
      break;
    // VIA's rules broken (provider.h: InvalidArgument): the VI is not made again.
    case IBV_WC_REM_INV_REQ_ERR:
      return InvalidArgument(
          fmt::format("{} could not take a message (remote invalid request: larger than its posted "
                      "receive buffer?); the VI breaks",
                      peer));
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return InvalidArgument(fmt::format(
          "a message found no receive descriptor posted at {} (VIA: the VI breaks)", peer));
    case IBV_WC_RETRY_EXC_ERR:
      return Unavailable(fmt::format("{} does not answer (transport retries exhausted)", peer));
    case IBV_WC_WR_FLUSH_ERR:
      return Unavailable(
          fmt::format("the VI to {} was flushed (its queue pair is in the error state)", peer));
    default:
      break;
  }
  return Unavailable(fmt::format("the VI to {} broke: {} (status {}, vendor error {:#x})", peer,
                                 ibv_wc_status_str(wc.status), static_cast<int>(wc.status),
                                 wc.vendor_err));
}

VerbsVi::VerbsVi(VerbsProvider& owner, void* context) : owner_(owner), context_(context) {}

VerbsVi::~VerbsVi() {
  rdma_cm_id* id;
  ibv_qp* qp;
  bool active;
  {
    std::lock_guard lock(mu_);
    id = id_;
    qp = qp_;
    active = !passive_;
    if (!DrainedLocked()) {
      // The handler destroyed a VI with work on it (it should not): the
      // completions still coming are dropped as of an unknown QP.
      Log().warn("tocl via: a VI to {} destroyed with {} descriptors on its QP", peer_,
                 sends_.size() + posted_recvs_);
      owner_.ReleaseCqes(static_cast<uint32_t>(sends_.size() + posted_recvs_));
    }
  }
  owner_.Forget(this, id, active);
  // No event of ours is unacked (NextCmEvent acks at once), so these do
  // not wait.
  if (qp != nullptr) rdma_destroy_qp(id);
  if (id != nullptr) (void)rdma_destroy_id(id);
}

rdma_cm_id* VerbsVi::id() {
  std::lock_guard lock(mu_);
  return id_;
}

bool VerbsVi::closed() {
  std::lock_guard lock(mu_);
  return state_ == State::kClosed;
}

// --- connection setup ------------------------------------------------------------

Status VerbsVi::ConnectRequest(std::string_view address, const ConnectData& data) {
  auto peer = tcp::SocketAddress::Parse(address);
  if (!peer.ok()) return peer.status().WithContext("via address");
  {
    std::lock_guard lock(mu_);
    if (state_ != State::kIdle) return FailedPrecondition("the VI is already connecting");
    state_ = State::kResolving;
    peer_ = fmt::format("{} at {}", data.peer.ToString(), peer->ToString());
    data.Encode(request_data_.data());
  }
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(owner_.active_channel(), &id, this, RDMA_PS_TCP) != 0) {
    return ErrnoStatus("rdma_create_id", errno);
  }
  owner_.AddId(id, this, /*active=*/true);
  {
    std::lock_guard lock(mu_);
    id_ = id;
  }
  // From our bind address, so that the id lands on the device of our PD.
  sockaddr_storage source{};
  std::memcpy(&source, owner_.bind_address().get(), owner_.bind_address().length());
  sockaddr_storage destination{};
  std::memcpy(&destination, peer->get(), peer->length());
  if (rdma_resolve_addr(id, reinterpret_cast<sockaddr*>(&source),
                        reinterpret_cast<sockaddr*>(&destination),
                        VerbsProvider::kResolveTimeoutMs) != 0) {
    return ErrnoStatus(fmt::format("rdma_resolve_addr {}", peer->ToString()), errno);
  }
  return Status::Ok();
}

int VerbsVi::OnActiveEvent(const CmEvent& event) {
  switch (event.type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: {
      std::lock_guard lock(mu_);
      if (state_ != State::kResolving) return 0;
      if (id_->verbs != owner_.pd()->context) {
        BreakLocked(Unavailable(fmt::format(
            "{} is reached through another RDMA device than the one this process listens on",
            peer_)));
      } else if (rdma_resolve_route(id_, VerbsProvider::kResolveTimeoutMs) != 0) {
        BreakLocked(ErrnoStatus("rdma_resolve_route", errno));
      }
      return 0;
    }
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      return OnRouteResolved();
    case RDMA_CM_EVENT_ESTABLISHED:
      return OnEstablished(event);
    case RDMA_CM_EVENT_REJECTED:
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_DEVICE_REMOVAL: {
      std::lock_guard lock(mu_);
      if (event.type == RDMA_CM_EVENT_REJECTED) {
        // Our peer's refusal carries its reason; a reject without it is the
        // CM's: nobody listens there.
        const std::string reason = DecodeRejectReason(event.private_data, event.status);
        std::string message = fmt::format("{} rejected the connection: {}", peer_, reason);
        BreakLocked(HasRejectReason(event.private_data) ? FailedPrecondition(std::move(message))
                                                        : NotFound(std::move(message)));
      } else if (event.type == RDMA_CM_EVENT_DISCONNECTED) {
        BreakLocked(Unavailable(fmt::format("{} closed the VI", peer_)));
      } else {
        BreakLocked(Unavailable(fmt::format("cannot connect to {}: {} (status {})", peer_,
                                            rdma_event_str(event.type), event.status)));
      }
      return 0;
    }
    default:
      return 0;  // TIMEWAIT_EXIT, ADDR_CHANGE
  }
}

int VerbsVi::OnRouteResolved() {
  std::lock_guard lock(mu_);
  if (state_ != State::kResolving) return 0;
  if (Status status = CreateQpLocked(); !status.ok()) {
    BreakLocked(status);
    return 0;
  }
  if (state_ != State::kResolving) return 0;  // a queued receive failed to post
  rdma_conn_param param{};
  param.private_data = request_data_.data();
  param.private_data_len = static_cast<uint8_t>(request_data_.size());
  // Send and receive only: no RDMA reads or atomics either way.
  param.responder_resources = 0;
  param.initiator_depth = 0;
  param.retry_count = kRetryCount;
  param.rnr_retry_count = kRnrRetryCount;
  if (rdma_connect(id_, &param) != 0) {
    BreakLocked(ErrnoStatus(fmt::format("rdma_connect to {}", peer_), errno));
    return 0;
  }
  state_ = State::kConnecting;
  connect_sent_ = true;
  return 0;
}

int VerbsVi::OnEstablished(const CmEvent& event) {
  auto data = ConnectData::Decode(event.private_data, owner_.num_classes());
  {
    std::lock_guard lock(mu_);
    if (state_ != State::kConnecting) return 0;
    if (!data.ok()) {
      BreakLocked(Status(data.status().code(), fmt::format("{} accepted with bad data: {}", peer_,
                                                           data.status().message())));
      return 0;
    }
    state_ = State::kConnected;
  }
  owner_.handler().OnConnected(context_, *data);
  return 1;
}

Status VerbsVi::Adopt(rdma_cm_id* id, std::string peer) {
  {
    std::lock_guard lock(mu_);
    if (state_ != State::kIdle) return FailedPrecondition("the VI is already connecting");
    if (id->verbs != owner_.pd()->context) {
      return Unavailable(fmt::format("the request from {} came on another RDMA device", peer));
    }
    id_ = id;
    passive_ = true;
    peer_ = std::move(peer);
    if (Status status = CreateQpLocked(); !status.ok()) {
      id_ = nullptr;
      return status;
    }
    state_ = State::kConnecting;
  }
  owner_.AddId(id, this, /*active=*/false);
  return Status::Ok();
}

Status VerbsVi::Accept(const ConnectData& reply) {
  std::byte data[ConnectData::kBytes];
  reply.Encode(data);
  rdma_conn_param param{};
  param.private_data = data;
  param.private_data_len = ConnectData::kBytes;
  param.responder_resources = 0;
  param.initiator_depth = 0;
  param.rnr_retry_count = kRnrRetryCount;
  std::lock_guard lock(mu_);
  if (state_ != State::kConnecting || !passive_) {
    return state_ == State::kBroken || state_ == State::kClosed
               ? Unavailable(why_.message())
               : FailedPrecondition("the VI has no request to accept");
  }
  // librdmacm moves the QP to RTR and RTS here: sends may follow at once.
  if (rdma_accept(id_, &param) != 0) return ErrnoStatus("rdma_accept", errno);
  state_ = State::kConnected;
  connect_sent_ = true;
  return Status::Ok();
}

Status VerbsVi::CreateQpLocked() {
  ibv_qp_init_attr attr{};
  attr.send_cq = owner_.cq();
  attr.recv_cq = owner_.cq();
  attr.cap.max_send_wr = kMaxSendWr;
  attr.cap.max_recv_wr = kMaxRecvWr;
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  attr.qp_type = IBV_QPT_RC;
  attr.sq_sig_all = 1;  // every send completes on the CQ: OnSendDone for each
  if (rdma_create_qp(id_, owner_.pd(), &attr) != 0) return ErrnoStatus("rdma_create_qp", errno);
  qp_ = id_->qp;
  // Registered before anything is posted, so every completion finds us.
  owner_.AddQp(qp_->qp_num, this);
  while (posted_recvs_ < recvs_.size()) {
    if (Status status = PostRecvLocked(recvs_[posted_recvs_]); !status.ok()) {
      BreakLocked(status);
      break;
    }
    ++posted_recvs_;
  }
  return Status::Ok();
}

// --- data path ----------------------------------------------------------------------

Status VerbsVi::PostSend(const Descriptor& descriptor, bool* done_now) {
  *done_now = false;  // a send always completes through the CQ
  if (descriptor.length > 0 && descriptor.slot->memory_key == 0) {
    return InvalidArgument("a send from memory not registered with the RDMA device");
  }
  std::lock_guard lock(mu_);
  if (state_ != State::kConnected) {
    if (state_ == State::kBroken || state_ == State::kClosed) return Unavailable(why_.message());
    return FailedPrecondition("the VI is not connected yet");
  }
  // A send that cannot be posted breaks the VI: the subsystem takes a
  // failed PostSend for a closing VI (OnClosed follows), and a QP that
  // refuses work is of no further use.
  if (!owner_.ReserveCqes(1)) {
    Status status = ResourceExhausted(fmt::format(
        "the via completion queue is full: the VI to {} is closed to make room", peer_));
    BreakLocked(status);
    return status;
  }
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(descriptor.slot->bytes);
  sge.length = descriptor.length;
  sge.lkey = descriptor.slot->memory_key;
  ibv_send_wr wr{};
  wr.wr_id = WrId(descriptor.slot, /*receive=*/false);
  wr.sg_list = descriptor.length > 0 ? &sge : nullptr;
  wr.num_sge = descriptor.length > 0 ? 1 : 0;  // a control message carries no bytes
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(descriptor.immediate);
  ibv_send_wr* bad = nullptr;
  if (const int error = ibv_post_send(qp_, &wr, &bad); error != 0) {
    owner_.ReleaseCqes(1);
    Status status = ErrnoStatus(fmt::format("ibv_post_send to {}", peer_), error);
    BreakLocked(status);
    return status;
  }
  sends_.push_back(descriptor.slot);
  return Status::Ok();
}

Status VerbsVi::PostRecv(const Descriptor& descriptor) {
  if (descriptor.length == 0 || descriptor.slot->memory_key == 0) {
    return InvalidArgument("a receive needs a buffer registered with the RDMA device");
  }
  std::lock_guard lock(mu_);
  if (state_ == State::kBroken || state_ == State::kClosed) return Unavailable(why_.message());
  if (qp_ != nullptr) TOCL_RETURN_IF_ERROR(PostRecvLocked(descriptor));
  // Before the QP exists (active side, resolving) it waits here, in order.
  recvs_.push_back(descriptor);
  if (qp_ != nullptr) ++posted_recvs_;
  return Status::Ok();
}

Status VerbsVi::PostRecvLocked(const Descriptor& descriptor) {
  if (!owner_.ReserveCqes(1)) {
    return ResourceExhausted("the via completion queue is full (too much in flight)");
  }
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(descriptor.slot->bytes);
  sge.length = descriptor.length;
  sge.lkey = descriptor.slot->memory_key;
  ibv_recv_wr wr{};
  wr.wr_id = WrId(descriptor.slot, /*receive=*/true);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (const int error = ibv_post_recv(qp_, &wr, &bad); error != 0) {
    owner_.ReleaseCqes(1);
    return ErrnoStatus("ibv_post_recv", error);
  }
  return Status::Ok();
}

void VerbsVi::OnCompletion(const ibv_wc& wc) {
  owner_.ReleaseCqes(1);
  const bool receive = (wc.wr_id & kRecvTag) != 0;
  detail::BufferSlot* slot = nullptr;
  uint32_t length = 0;
  uint32_t immediate = 0;
  Status status;
  {
    std::lock_guard lock(mu_);
    uint32_t capacity = 0;
    // An RC QP completes each queue in order, flushes included.
    if (receive) {
      if (posted_recvs_ == 0) {
        Log().error("tocl via: a receive completion on {} with none posted", peer_);
        return;
      }
      slot = recvs_.front().slot;
      capacity = recvs_.front().length;
      recvs_.pop_front();
      --posted_recvs_;
    } else {
      if (sends_.empty()) {
        Log().error("tocl via: a send completion on {} with none posted", peer_);
        return;
      }
      slot = sends_.front();
      sends_.pop_front();
    }
    if (WrId(slot, receive) != wc.wr_id) {
      Log().error("tocl via: completions on {} out of order", peer_);
    }
    if (wc.status == IBV_WC_SUCCESS) {
      if (receive && (wc.wc_flags & IBV_WC_WITH_IMM) == 0) {
        // Our peers always send with immediate data (VIA's control word).
        status = InvalidArgument(fmt::format("{} sent a message without immediate data", peer_));
        BreakLocked(status);
      } else if (receive) {
        length = wc.byte_len;
        immediate = ntohl(wc.imm_data);
      }
    } else if (wc.status == IBV_WC_WR_FLUSH_ERR &&
               (state_ == State::kBroken || state_ == State::kClosed)) {
      status = why_;  // flushed because we broke it: say why
    } else {
      status = CompletionError(wc, receive, capacity, peer_);
      BreakLocked(status);
    }
    if (state_ == State::kBroken && DrainedLocked()) ScheduleFinishLocked();
  }
  if (receive) {
    owner_.handler().OnRecvDone(context_, slot, length, immediate, status);
  } else {
    owner_.handler().OnSendDone(context_, slot, status);
  }
}

// --- teardown --------------------------------------------------------------------------

void VerbsVi::Disconnect(std::string_view why) {
  Break(Unavailable(std::string(why)));
}

void VerbsVi::Break(Status why) {
  std::lock_guard lock(mu_);
  BreakLocked(std::move(why));
}

void VerbsVi::BreakLocked(Status why) {
  if (state_ == State::kBroken || state_ == State::kClosed) return;
  state_ = State::kBroken;
  why_ = std::move(why);
  if (qp_ != nullptr) {
    // Both sides call rdma_disconnect (rdma_disconnect(3)); it fails
    // harmlessly on a connection that is not up yet.
    if (connect_sent_) (void)rdma_disconnect(id_);
    // rdma_disconnect moves an IB QP to the error state but an iWARP one
    // only to SQD: make sure everything posted is flushed.
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    if (const int error = ibv_modify_qp(qp_, &attr, IBV_QP_STATE); error != 0) {
      Log().warn("tocl via: VI to {}: {}", peer_,
                 ErrnoStatus("ibv_modify_qp to the error state", error).message());
    }
  }
  if (DrainedLocked()) ScheduleFinishLocked();
}

void VerbsVi::ScheduleFinishLocked() {
  if (finish_scheduled_) return;
  finish_scheduled_ = true;
  owner_.ScheduleFinish(this);
}

bool VerbsVi::Finish() {
  std::deque<Descriptor> unposted;
  Status why;
  {
    std::lock_guard lock(mu_);
    finish_scheduled_ = false;
    if (state_ != State::kBroken || !DrainedLocked()) return false;
    state_ = State::kClosed;
    unposted.swap(recvs_);
    why = why_;
  }
  for (const Descriptor& receive : unposted) {
    owner_.handler().OnRecvDone(context_, receive.slot, 0, 0, why);
  }
  owner_.handler().OnClosed(context_, why);
  return true;
}

void VerbsVi::ForceFinish() {
  std::deque<detail::BufferSlot*> sends;
  std::deque<Descriptor> receives;
  Status why;
  {
    std::lock_guard lock(mu_);
    if (state_ == State::kClosed) return;
    state_ = State::kClosed;
    if (why_.ok()) why_ = Unavailable("the via network is closed");
    why = why_;
    owner_.ReleaseCqes(static_cast<uint32_t>(sends_.size() + posted_recvs_));
    // Completions still coming for this QP are dropped from now on.
    if (qp_ != nullptr) owner_.ForgetQp(qp_->qp_num);
    sends.swap(sends_);
    receives.swap(recvs_);
    posted_recvs_ = 0;
  }
  for (detail::BufferSlot* slot : sends) owner_.handler().OnSendDone(context_, slot, why);
  for (const Descriptor& receive : receives) {
    owner_.handler().OnRecvDone(context_, receive.slot, 0, 0, why);
  }
  owner_.handler().OnClosed(context_, why);
}

}  // namespace tocl::subsystem::via
