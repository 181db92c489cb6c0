#include "subsystem/via/ibverbs/verbs_provider.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/logger.h"
#include "subsystem/via/ibverbs/verbs_vi.h"

namespace tocl::subsystem::via {

namespace {

struct DeviceProbe {
  bool present = false;
  std::string reason;  // why not, for messages
};

// Probed once per process: ibv_get_device_list walks sysfs, and the answer
// does not change under a running process often enough to matter.
const DeviceProbe& Probe() {
  static const DeviceProbe probe = [] {
    DeviceProbe result;
    int count = 0;
    ibv_device** list = ibv_get_device_list(&count);
    if (list == nullptr) {
      result.reason = fmt::format("ibv_get_device_list: {}", std::strerror(errno));
    } else {
      if (count > 0) {
        result.present = true;
      } else {
        result.reason = "ibv_get_device_list: no devices";
      }
      ibv_free_device_list(list);
    }
    if (!result.present) {
      Log().info("tocl via: no RDMA device ({}); the ibverbs provider is not offered",
                 result.reason);
    }
    return result;
  }();
  return probe;
}

Status SetNonBlocking(int fd, std::string_view what) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return ErrnoStatus(fmt::format("fcntl O_NONBLOCK on the {}", what), errno);
  }
  return Status::Ok();
}

// librdmacm wants a mutable sockaddr.
sockaddr_storage Storage(const tcp::SocketAddress& address) {
  sockaddr_storage storage{};
  std::memcpy(&storage, address.get(), address.length());
  return storage;
}

std::string PeerAddress(rdma_cm_id* id) {
  const sockaddr* peer = rdma_get_peer_addr(id);
  socklen_t length = 0;
  if (peer->sa_family == AF_INET) length = sizeof(sockaddr_in);
  if (peer->sa_family == AF_INET6) length = sizeof(sockaddr_in6);
  if (length == 0) return "an RDMA peer";
  sockaddr_storage storage{};
  std::memcpy(&storage, peer, length);
  return tcp::SocketAddress::FromSockaddr(storage, length).ToString();
}

class VerbsRequest final : public PendingRequest {
 public:
  VerbsRequest(rdma_cm_id* id, const ConnectData& data, std::string peer_address)
      : id_(id), data_(data), peer_address_(std::move(peer_address)) {}
  // A request nobody answered is rejected; its id is destroyed unless a VI
  // took it over.
  ~VerbsRequest() override {
    if (adopted_) return;
    if (!answered_) (void)rdma_reject(id_, nullptr, 0);
    (void)rdma_destroy_id(id_);
  }
  VerbsRequest(const VerbsRequest&) = delete;
  VerbsRequest& operator=(const VerbsRequest&) = delete;

  const ConnectData& data() const override { return data_; }
  const std::string& peer_address() const override { return peer_address_; }

  rdma_cm_id* id() const { return id_; }
  bool adopted() const { return adopted_; }
  void set_adopted() { adopted_ = true; }
  void set_answered() { answered_ = true; }

 private:
  rdma_cm_id* const id_;
  const ConnectData data_;
  const std::string peer_address_;
  bool adopted_ = false;   // a VI owns the id now
  bool answered_ = false;  // accepted or rejected
};

}  // namespace

bool IbverbsDevicePresent() {
  return Probe().present;
}

Result<std::unique_ptr<Provider>> OpenIbverbsProvider(const ProviderOptions& options,
                                                      Reactor& reactor,
                                                      CompletionHandler& handler) {
  if (!IbverbsDevicePresent()) {
    return Unavailable(fmt::format("no RDMA device ({})", Probe().reason));
  }
  auto provider = std::make_unique<VerbsProvider>(options, reactor, handler);
  TOCL_RETURN_IF_ERROR(provider->Open());
  return std::unique_ptr<Provider>(std::move(provider));
}

Result<std::optional<CmEvent>> NextCmEvent(rdma_event_channel* channel) {
  rdma_cm_event* event = nullptr;
  if (rdma_get_cm_event(channel, &event) != 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      return std::optional<CmEvent>();
    }
    return ErrnoStatus("rdma_get_cm_event", errno);
  }
  CmEvent copy;
  copy.type = event->event;
  copy.status = event->status;
  copy.id = event->id;
  // The private data lives in the event until it is acked.
  const auto* data = static_cast<const std::byte*>(event->param.conn.private_data);
  if (data != nullptr) {
    copy.private_data.assign(data, data + event->param.conn.private_data_len);
  }
  (void)rdma_ack_cm_event(event);
  return std::optional<CmEvent>(std::move(copy));
}

VerbsProvider::VerbsProvider(const ProviderOptions& options, Reactor& reactor,
                             CompletionHandler& handler)
    : options_(options), reactor_(reactor), handler_(handler) {}

VerbsProvider::~VerbsProvider() {
  if (completions_registered_) reactor_.Remove(comp_channel_->fd);
  if (active_registered_) reactor_.Remove(active_channel_->fd);
  std::lock_guard lock(mu_);
  // Every VI must be gone by now (the subsystem destroys them first): their
  // ids are on our channels and their QPs on our CQ.
  if (!vis_.empty()) Log().error("tocl via: {} ibverbs VIs outlived their provider", vis_.size());
}

Status VerbsProvider::Open() {
  auto bind_address = tcp::SocketAddress::FromIp(options_.bind_ip, 0);
  if (!bind_address.ok()) return bind_address.status().WithContext("via bind address");
  bind_address_ = *bind_address;

  passive_channel_.reset(rdma_create_event_channel());
  if (!passive_channel_) return ErrnoStatus("rdma_create_event_channel", errno);
  TOCL_RETURN_IF_ERROR(SetNonBlocking(passive_channel_->fd, "rdma_cm channel"));
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(passive_channel_.get(), &id, this, RDMA_PS_TCP) != 0) {
    return ErrnoStatus("rdma_create_id", errno);
  }
  listen_id_.reset(id);
  sockaddr_storage bind_storage = Storage(bind_address_);
  if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&bind_storage)) != 0) {
    return ErrnoStatus(fmt::format("rdma_bind_addr {}", options_.bind_ip), errno);
  }
  // Bound to an address of no RDMA device (a wildcard, or a plain
  // Ethernet port), the id has no device to take the PD and CQ from.
  if (id->verbs == nullptr) {
    return Unavailable(
        fmt::format("{} is not an address of an RDMA device (rdma_bind_addr found no device "
                    "for it)",
                    options_.bind_ip));
  }
  if (rdma_listen(id, kListenBacklog) != 0) return ErrnoStatus("rdma_listen", errno);
  auto listening = tcp::SocketAddress::FromIp(options_.bind_ip, ntohs(rdma_get_src_port(id)));
  if (!listening.ok()) return listening.status();
  address_ = listening->ToString();

  pd_.reset(ibv_alloc_pd(id->verbs));
  if (!pd_) return ErrnoStatus("ibv_alloc_pd", errno);
  memory_ = std::make_unique<verbs::RegisteredSlabMemory>(pd_.get());

  comp_channel_.reset(ibv_create_comp_channel(id->verbs));
  if (!comp_channel_) return ErrnoStatus("ibv_create_comp_channel", errno);
  TOCL_RETURN_IF_ERROR(SetNonBlocking(comp_channel_->fd, "completion channel"));
  ibv_device_attr device{};
  if (const int error = ibv_query_device(id->verbs, &device); error != 0) {
    return ErrnoStatus("ibv_query_device", error);
  }
  const int entries = std::min(kCqEntries, device.max_cqe);
  cq_.reset(ibv_create_cq(id->verbs, entries, this, comp_channel_.get(), 0));
  if (!cq_) return ErrnoStatus(fmt::format("ibv_create_cq of {} entries", entries), errno);
  cq_capacity_ = static_cast<uint32_t>(entries);

  active_channel_.reset(rdma_create_event_channel());
  if (!active_channel_) return ErrnoStatus("rdma_create_event_channel", errno);
  TOCL_RETURN_IF_ERROR(SetNonBlocking(active_channel_->fd, "rdma_cm channel"));

  const int event = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event < 0) return ErrnoStatus("eventfd", errno);
  interrupt_fd_ = Fd(event);

  TOCL_RETURN_IF_ERROR(reactor_.Add(comp_channel_->fd, EPOLLIN, &completions_ready_));
  completions_registered_ = true;
  TOCL_RETURN_IF_ERROR(reactor_.Add(active_channel_->fd, EPOLLIN, &active_ready_));
  active_registered_ = true;
  if (const int error = ibv_req_notify_cq(cq_.get(), 0); error != 0) {
    return ErrnoStatus("ibv_req_notify_cq", error);
  }
  Log().debug("tocl via: ibverbs on {} ({}), {} CQ entries", address_,
              ibv_get_device_name(id->verbs->device), entries);
  return Status::Ok();
}

// --- the VI registry --------------------------------------------------------------

Result<std::unique_ptr<ProviderVi>> VerbsProvider::CreateVi(void* context,
                                                            PendingRequest* request) {
  auto vi = std::make_unique<VerbsVi>(*this, context);
  {
    std::lock_guard lock(mu_);
    if (closed_) return FailedPrecondition("the via network is closed");
    vis_.insert(vi.get());
  }
  if (request != nullptr) {
    auto& verbs_request = static_cast<VerbsRequest&>(*request);
    if (verbs_request.adopted()) return FailedPrecondition("the request already has its VI");
    TOCL_RETURN_IF_ERROR(vi->Adopt(verbs_request.id(), request->peer_address()));
    verbs_request.set_adopted();
  }
  return std::unique_ptr<ProviderVi>(std::move(vi));
}

void VerbsProvider::AddId(rdma_cm_id* id, VerbsVi* vi, bool active) {
  std::lock_guard lock(mu_);
  by_id_[id] = vi;
  if (active) active_ids_.fetch_add(1, std::memory_order_relaxed);
}

void VerbsProvider::AddQp(uint32_t qp_num, VerbsVi* vi) {
  std::lock_guard lock(qp_mu_);
  by_qp_[qp_num] = vi;
}

void VerbsProvider::ForgetQp(uint32_t qp_num) {
  std::lock_guard lock(qp_mu_);
  by_qp_.erase(qp_num);
}

void VerbsProvider::Forget(VerbsVi* vi, rdma_cm_id* id, bool active) {
  {
    std::lock_guard lock(mu_);
    vis_.erase(vi);
    if (id != nullptr && by_id_.erase(id) > 0 && active) {
      active_ids_.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  {
    std::lock_guard lock(qp_mu_);
    std::erase_if(by_qp_, [vi](const auto& entry) { return entry.second == vi; });
  }
  std::lock_guard lock(finish_mu_);
  std::erase(to_finish_, vi);
}

void VerbsProvider::ScheduleFinish(VerbsVi* vi) {
  {
    std::lock_guard lock(finish_mu_);
    to_finish_.push_back(vi);
  }
  reactor_.Wake();
}

bool VerbsProvider::ReserveCqes(uint32_t count) {
  if (cq_reserved_.fetch_add(count, std::memory_order_relaxed) + count <= cq_capacity_) {
    return true;
  }
  cq_reserved_.fetch_sub(count, std::memory_order_relaxed);
  return false;
}

void VerbsProvider::ReleaseCqes(uint32_t count) {
  cq_reserved_.fetch_sub(count, std::memory_order_relaxed);
}

// --- polling thread ----------------------------------------------------------------

void VerbsProvider::ReadyHandler::OnReady(uint32_t /*events*/) {
  if (completions_) owner_.AckCompletionEvents();
  owner_.Poll();
}

void VerbsProvider::AckCompletionEvents() {
  unsigned events = 0;
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  while (ibv_get_cq_event(comp_channel_.get(), &cq, &context) == 0) ++events;
  // One ack per batch: it takes a mutex. ibv_destroy_cq waits for them all.
  if (events > 0) ibv_ack_cq_events(cq_.get(), events);
}

int VerbsProvider::PollCq() {
  if (!cq_) return 0;  // never opened: the tests drive VIs without a device
  int reported = 0;
  ibv_wc completions[kPollBatch];
  for (int batch = 0; batch < kMaxBatchesPerPoll; ++batch) {
    const int found = ibv_poll_cq(cq_.get(), kPollBatch, completions);
    if (found < 0) {
      if (!cq_broken_logged_) Log().error("tocl via: ibv_poll_cq failed ({})", found);
      cq_broken_logged_ = true;
      return reported;
    }
    for (int i = 0; i < found; ++i) {
      VerbsVi* vi = nullptr;
      {
        std::lock_guard lock(qp_mu_);
        if (auto it = by_qp_.find(completions[i].qp_num); it != by_qp_.end()) vi = it->second;
      }
      if (vi == nullptr) {
        // A QP destroyed with work on it (Close gave up on its flushes).
        Log().debug("tocl via: a completion for QP {} that is gone", completions[i].qp_num);
        continue;
      }
      // Only this thread destroys a VI that has work posted, and only after
      // OnClosed, which its last completion precedes.
      vi->OnCompletion(completions[i]);
      ++reported;
    }
    if (found < kPollBatch) break;
  }
  return reported;
}

int VerbsProvider::PollActiveChannel() {
  int reported = 0;
  // Bounded like PollCq; level-triggered epoll comes back for the rest.
  for (int i = 0; i < kPollBatch; ++i) {
    auto event = NextCmEvent(active_channel_.get());
    if (!event.ok()) {
      Log().warn("tocl via: {}", event.status().message());
      return reported;
    }
    if (!event->has_value()) return reported;
    VerbsVi* vi = nullptr;
    {
      std::lock_guard lock(mu_);
      if (auto it = by_id_.find((*event)->id); it != by_id_.end()) vi = it->second;
    }
    // Active ids are destroyed only on this thread (after OnClosed).
    if (vi != nullptr) reported += vi->OnActiveEvent(**event);
  }
  return reported;
}

int VerbsProvider::DeliverFinishes() {
  std::vector<VerbsVi*> finish;
  {
    std::lock_guard lock(finish_mu_);
    if (to_finish_.empty()) return 0;
    finish.swap(to_finish_);
  }
  // The handler destroys a VI only after OnClosed, which Finish reports
  // last: each pointer here is still alive when its turn comes.
  int reported = 0;
  for (VerbsVi* vi : finish) reported += vi->Finish() ? 1 : 0;
  return reported;
}

int VerbsProvider::Poll() {
  int reported = PollCq();
  if (active_ids_.load(std::memory_order_relaxed) > 0) reported += PollActiveChannel();
  reported += DeliverFinishes();
  return reported;
}

bool VerbsProvider::PrepareToSleep() {
  {
    std::lock_guard lock(finish_mu_);
    if (!to_finish_.empty()) return false;
  }
  if (!cq_) return true;
  // Arm, then look once more: a completion that came before the arm
  // raises no event, so it must be seen here.
  if (const int error = ibv_req_notify_cq(cq_.get(), 0); error != 0) {
    Log().warn("tocl via: {}", ErrnoStatus("ibv_req_notify_cq", error).message());
    return false;
  }
  return PollCq() == 0;
}

bool VerbsProvider::AllClosed() {
  std::lock_guard lock(mu_);
  return std::all_of(vis_.begin(), vis_.end(), [](VerbsVi* vi) { return vi->closed(); });
}

void VerbsProvider::Close() {
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    closed_ = true;
    for (VerbsVi* vi : vis_) vi->Break(Unavailable("the via network is closed"));
  }
  InterruptWait();
  // The QPs are in the error state: their flushes come through the CQ.
  const auto deadline = std::chrono::steady_clock::now() + kCloseTimeout;
  while (true) {
    Poll();
    if (AllClosed() || !cq_ || std::chrono::steady_clock::now() >= deadline) break;
    if (PrepareToSleep()) {
      pollfd ready{comp_channel_->fd, POLLIN, 0};
      (void)poll(&ready, 1, 10);
      AckCompletionEvents();
    }
  }
  std::vector<VerbsVi*> stuck;
  {
    std::lock_guard lock(mu_);
    for (VerbsVi* vi : vis_) {
      if (!vi->closed()) stuck.push_back(vi);
    }
  }
  // Each has work posted, so nobody else destroys it before its OnClosed.
  if (!stuck.empty()) {
    Log().warn("tocl via: {} VIs not flushed within {} s; completing them", stuck.size(),
               kCloseTimeout.count());
  }
  for (VerbsVi* vi : stuck) vi->ForceFinish();
}

// --- connection manager ---------------------------------------------------------

void VerbsProvider::InterruptWait() {
  const uint64_t one = 1;
  if (interrupt_fd_.valid()) (void)!write(interrupt_fd_.get(), &one, sizeof(one));
}

std::unique_ptr<PendingRequest> VerbsProvider::OnPassiveEvent(CmEvent& event) {
  switch (event.type) {
    case RDMA_CM_EVENT_CONNECT_REQUEST: {
      std::string peer = PeerAddress(event.id);
      auto data = ConnectData::Decode(event.private_data, options_.num_classes);
      if (!data.ok()) {
        Log().warn("tocl via: connection request from {} rejected: {}", peer,
                   data.status().message());
        // With the reason: a requester of another version stops at once.
        const std::vector<std::byte> reason = EncodeRejectData(data.status().message());
        (void)rdma_reject(event.id, reason.data(), static_cast<uint8_t>(reason.size()));
        (void)rdma_destroy_id(event.id);
        return nullptr;
      }
      return std::make_unique<VerbsRequest>(event.id, *data, std::move(peer));
    }
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_REJECTED:
    case RDMA_CM_EVENT_DEVICE_REMOVAL: {
      // An accepted VI ended. Under mu_ so that the VI cannot be destroyed
      // meanwhile; Break only schedules its finish on the polling thread.
      std::lock_guard lock(mu_);
      if (auto it = by_id_.find(event.id); it != by_id_.end()) {
        it->second->Break(
            Unavailable(event.type == RDMA_CM_EVENT_DISCONNECTED
                            ? fmt::format("{} closed the VI", PeerAddress(event.id))
                            : fmt::format("the VI to {} failed: {}", PeerAddress(event.id),
                                          rdma_event_str(event.type))));
      } else if (event.id == listen_id_.get()) {
        Log().error("tocl via: the listening id on {}: {}", address_, rdma_event_str(event.type));
      }
      return nullptr;
    }
    default:
      // ESTABLISHED (the accept took: the VI already sends), TIMEWAIT_EXIT,
      // ADDR_CHANGE: nothing to do.
      return nullptr;
  }
}

Result<std::unique_ptr<PendingRequest>> VerbsProvider::ConnectWait(
    std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (closed_) return Status(StatusCode::kCancelled, "the via network is closed");
    }
    for (;;) {
      auto event = NextCmEvent(passive_channel_.get());
      if (!event.ok()) return event.status();
      if (!event->has_value()) break;
      if (auto request = OnPassiveEvent(**event)) return request;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return DeadlineExceeded("no connection request");
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
    pollfd fds[2] = {{interrupt_fd_.get(), POLLIN, 0}, {passive_channel_->fd, POLLIN, 0}};
    const int ready = poll(fds, 2, static_cast<int>(std::min<int64_t>(ms, 60'000)));
    if (ready < 0 && errno != EINTR) return ErrnoStatus("poll", errno);
    if (fds[0].revents != 0) {
      uint64_t value;
      (void)!read(interrupt_fd_.get(), &value, sizeof(value));
      return Status(StatusCode::kCancelled, "the connection manager was interrupted");
    }
  }
}

Status VerbsProvider::ConnectAccept(PendingRequest& request, ProviderVi& vi,
                                    const ConnectData& reply) {
  auto& verbs_request = static_cast<VerbsRequest&>(request);
  auto& verbs_vi = static_cast<VerbsVi&>(vi);
  if (!verbs_request.adopted() || verbs_vi.id() != verbs_request.id()) {
    return InvalidArgument("ConnectAccept: the VI was not created for this request");
  }
  Status status = verbs_vi.Accept(reply);
  if (!status.ok()) {
    // Tell the requester now rather than let its connect time out.
    (void)rdma_reject(verbs_request.id(), nullptr, 0);
  }
  verbs_request.set_answered();
  return status.WithContext(fmt::format("accept {}", request.peer_address()));
}

void VerbsProvider::ConnectReject(PendingRequest& request, std::string_view reason) {
  auto& verbs_request = static_cast<VerbsRequest&>(request);
  const std::vector<std::byte> data = EncodeRejectData(reason);
  if (rdma_reject(verbs_request.id(), data.data(), static_cast<uint8_t>(data.size())) != 0) {
    Log().debug("tocl via: reject {}: {}", request.peer_address(),
                ErrnoStatus("rdma_reject", errno).message());
  }
  // The id goes with the request (or with the VI that adopted it).
  verbs_request.set_answered();
}

std::vector<std::byte> EncodeRejectData(std::string_view reason) {
  const std::string_view tag = VerbsProvider::kRejectTag;
  const size_t length = std::min(reason.size(), VerbsProvider::kMaxRejectBytes - tag.size());
  std::vector<std::byte> data(tag.size() + length);
  std::memcpy(data.data(), tag.data(), tag.size());
  std::memcpy(data.data() + tag.size(), reason.data(), length);
  return data;
}

bool HasRejectReason(std::span<const std::byte> data) {
  const std::string_view tag = VerbsProvider::kRejectTag;
  return data.size() > tag.size() && std::memcmp(data.data(), tag.data(), tag.size()) == 0;
}

std::string DecodeRejectReason(std::span<const std::byte> data, int status) {
  const std::string_view tag = VerbsProvider::kRejectTag;
  if (HasRejectReason(data)) {
    // The transport may pad the data with zeros.
    const char* text = reinterpret_cast<const char*>(data.data()) + tag.size();
    return std::string(text, strnlen(text, data.size() - tag.size()));
  }
  // IB CM reject reasons (IBTA 12.6.7.2): 8 is "invalid service ID", i.e.
  // nobody listens on that port; 28 is a consumer reject without our data.
  if (status == 8) return "nothing listens there (reject reason 8)";
  return fmt::format("reject reason {}", status);
}

}  // namespace tocl::subsystem::via
