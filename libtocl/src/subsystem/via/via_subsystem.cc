#include "subsystem/via/via_subsystem.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cstring>
#include <utility>

#include "buffers/size_class.h"
#include "core/logger.h"
#include "subsystem/tcp/socket.h"
#include "subsystem/via/vi_protocol.h"

namespace tocl::subsystem::via {

namespace {

using Clock = std::chrono::steady_clock;

// How long an entry whose request lost a crossing waits for the peer's
// request before asking again (the peer may have given up on its own).
constexpr std::chrono::seconds kCrossedRetry{1};
// The reason a crossing request is rejected with; the loser recognises it.
constexpr std::string_view kCrossed = "crossed";
// The reason a request is rejected with when the pool has no buffers to
// post for it: the requester tries again later, it is not broken.
constexpr std::string_view kBusy = "no receive buffers now (pool at its cap)";

uint64_t EntryKey(Gid peer, uint32_t class_index) {
  return peer.raw() | class_index;  // a process id has 24 zero thread bits
}

}  // namespace

std::optional<ProviderAddress> SplitAddress(std::string_view address) {
  const size_t colon = address.find(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  return ProviderAddress{.provider = address.substr(0, colon), .rest = address.substr(colon + 1)};
}

// What the runtime holds for one peer process: its entries, one per class,
// taken from the pool on first use.
class ViaSubsystem::ViaRoute final : public Route {
 public:
  ViaRoute(ViaSubsystem& owner, Gid peer, std::string address)
      : owner_(owner), peer_(peer), address_(std::move(address)) {}
  ~ViaRoute() override {
    // Sends still waiting for this peer fail with the route; its VIs stay
    // in the pool (they belong to the process, not to the route).
    for (auto& entry : entries_) {
      if (!entry) continue;
      std::lock_guard lock(entry->mu);
      owner_.FailPendingLocked(*entry, Unavailable("the route was dropped"));
    }
  }

  Status Post(detail::BufferSlot* slot) override {
    const uint32_t length = slot->header().length;
    const uint32_t class_index = buffers::ClassFor(length);
    if (class_index >= owner_.options_.num_classes ||
        wire::kHeaderBytes + length > buffers::ClassBytes(slot->class_index)) {
      return InvalidArgument(fmt::format("a frame of {} payload bytes in a buffer of {}", length,
                                         buffers::ClassBytes(slot->class_index)));
    }
    return PostOn(slot, class_index);
  }

  Status PostOn(detail::BufferSlot* slot, uint32_t class_index) {
    std::shared_ptr<ViEntry>& entry = Entry(class_index);
    std::lock_guard lock(entry->mu);
    return owner_.PostLocked(*entry, slot, /*check_room=*/true);
  }

  Status PostCopy(const wire::Header& /*header*/, std::span<const std::byte> /*payload*/) override {
    return Status(StatusCode::kUnimplemented, "via sends pool buffers only");
  }

  bool Drained() const override {
    for (auto& entry : entries_) {
      if (!entry) continue;
      std::lock_guard lock(entry->mu);
      if (!entry->pending.empty()) return false;
      if (entry->vi != nullptr && entry->vi->in_flight.load(std::memory_order_acquire) != 0) {
        return false;
      }
    }
    // VIs that left their entry (closing, superseded) may still be sending.
    for (const auto& vi : owner_.SnapshotVis()) {
      if (vi->peer == peer_ && vi->in_flight.load(std::memory_order_acquire) != 0) return false;
    }
    return true;
  }

  bool Broken() const override {
    for (auto& entry : entries_) {
      if (!entry) continue;
      std::lock_guard lock(entry->mu);
      if (!entry->broken.ok()) return true;
    }
    return false;
  }

 private:
  std::shared_ptr<ViEntry>& Entry(uint32_t class_index) {
    std::shared_ptr<ViEntry>& entry = entries_[class_index];
    if (!entry) {
      entry = owner_.EntryFor(peer_, class_index);
      std::lock_guard lock(entry->mu);
      entry->address = address_;
      // A new route is a new attempt: what broke before is forgotten.
      entry->broken = Status::Ok();
    }
    return entry;
  }

  ViaSubsystem& owner_;
  const Gid peer_;
  const std::string address_;
  // Touched by one sender at a time (the runtime holds the peer's lock).
  std::array<std::shared_ptr<ViEntry>, buffers::kMaxClasses> entries_;
};

Result<std::unique_ptr<ViaSubsystem>> ViaSubsystem::Open(const ViaOptions& options,
                                                         Reactor& reactor, Sink& sink,
                                                         buffers::PoolBudget& budget) {
  if (!options.self_process.is_process()) {
    return InvalidArgument(
        fmt::format("via: {} is not a process id", options.self_process.ToString()));
  }
  if (options.num_classes == 0 || options.num_classes > buffers::kMaxClasses) {
    return InvalidArgument(fmt::format("via: {} size classes (1..{} allowed)", options.num_classes,
                                       buffers::kMaxClasses));
  }
  if (options.max_vis < 1) return InvalidArgument("via: the VI cap must be at least 1");
  std::unique_ptr<ViaSubsystem> via(new ViaSubsystem(options, reactor, sink));
  TOCL_RETURN_IF_ERROR(via->Start(budget));
  return via;
}

ViaSubsystem::ViaSubsystem(const ViaOptions& options, Reactor& reactor, Sink& sink)
    : options_(options),
      reactor_(reactor),
      sink_(sink),
      limits_{.max_payload = static_cast<uint32_t>(buffers::ClassBytes(options.num_classes - 1) -
                                                   wire::kHeaderBytes)} {}

Status ViaSubsystem::Start(buffers::PoolBudget& budget) {
  ProviderOptions provider_options{.self_process = options_.self_process,
                                   .key = options_.key,
                                   .bind_ip = options_.bind_address,
                                   .num_classes = options_.num_classes};
  const std::string& wanted = options_.provider;
  if (wanted == "ibverbs" || (wanted == "auto" && IbverbsDevicePresent())) {
    auto opened = OpenIbverbsProvider(provider_options, reactor_, *this);
    if (opened.ok()) {
      provider_ = std::move(*opened);
    } else if (wanted == "ibverbs") {
      return opened.status().WithContext("via provider ibverbs");
    } else {
      Log().info("tocl via: ibverbs not used on {}: {}; using sockets", options_.bind_address,
                 opened.status().message());
    }
  } else if (wanted != "sockets" && wanted != "auto") {
    return InvalidArgument(
        fmt::format("via: unknown provider '{}' (sockets, ibverbs or auto)", wanted));
  }
  if (!provider_) {
    TOCL_ASSIGN_OR_RETURN(provider_, OpenSocketsProvider(provider_options, reactor_, *this));
  }
  pool_ = std::make_unique<buffers::BufferPool>(Network::kVia, options_.num_classes,
                                                provider_->slab_memory(), budget);
  address_ = fmt::format("{}:{}", provider_->name(), provider_->address());
  connection_manager_ = std::thread([this] { ServeConnections(); });
  Log().debug("tocl via: {} listens on {}", options_.self_process.ToString(), address_);
  return Status::Ok();
}

ViaSubsystem::~ViaSubsystem() {
  if (!closing_) Close();
  FreeClosed();
}

bool ViaSubsystem::Reaches(Gid /*peer_process*/, std::string_view address) const {
  const std::optional<ProviderAddress> split = SplitAddress(address);
  return split && split->provider == provider_->name() &&
         tcp::SocketAddress::Parse(split->rest).ok();
}

Result<std::unique_ptr<Route>> ViaSubsystem::Connect(Gid peer_process, std::string_view address) {
  if (!peer_process.is_process()) {
    return InvalidArgument(fmt::format("via: {} is not a process id", peer_process.ToString()));
  }
  const std::optional<ProviderAddress> split = SplitAddress(address);
  if (!split || !tcp::SocketAddress::Parse(split->rest).ok()) {
    return InvalidArgument(fmt::format("via address of {}: '{}' is not PROVIDER:IP:PORT",
                                       peer_process.ToString(), address));
  }
  if (split->provider != provider_->name()) {
    return InvalidArgument(fmt::format("via address of {}: provider {}, this process uses {}",
                                       peer_process.ToString(), split->provider,
                                       provider_->name()));
  }
  if (stop_.load()) return FailedPrecondition("the via subsystem is closed");
  return std::unique_ptr<Route>(
      std::make_unique<ViaRoute>(*this, peer_process, std::string(split->rest)));
}

std::shared_ptr<ViEntry> ViaSubsystem::EntryFor(Gid peer, uint32_t class_index) {
  std::lock_guard lock(entries_mu_);
  auto& entry = entries_[EntryKey(peer, class_index)];
  if (!entry) entry = std::make_shared<ViEntry>(peer, class_index);
  return entry;
}

// --- sending ------------------------------------------------------------------

Status ViaSubsystem::PostLocked(ViEntry& entry, detail::BufferSlot* slot, bool check_room) {
  if (!entry.broken.ok()) return Unavailable(entry.broken.message());
  if (stop_.load(std::memory_order_relaxed)) return Unavailable("the via subsystem is closed");
  const size_t bytes = wire::kHeaderBytes + slot->header().length;
  if (check_room && !entry.pending.empty() &&
      entry.pending_bytes + bytes > options_.max_queued_bytes_per_route) {
    return Status(StatusCode::kTryAgain, "send queue full");
  }
  if (provider_->needs_registered_memory() && slot->pool != pool_.get()) {
    // Another network's buffer: the provider can only send registered memory.
    detail::BufferSlot* own = pool_->TryGet(entry.class_index);
    if (own == nullptr) return Status(StatusCode::kTryAgain, "via pool at its cap");
    std::memcpy(own->bytes, slot->bytes, bytes);
    CompleteSend(slot, /*ok=*/true);
    slot = own;
  }
  slot->set_state(BufferState::kInFlight);
  entry.pending.push_back(slot);
  entry.pending_bytes += bytes;
  if (entry.vi == nullptr) {
    const bool waiting_for_crossed = Clock::now() - entry.crossed_at < kCrossedRetry;
    if (!waiting_for_crossed) {
      // The shared_ptr of an entry is held by every route using it.
      OpenViLocked(entry, EntryFor(entry.peer, entry.class_index));
    }
  }
  FlushLocked(entry);
  return Status::Ok();
}

std::unique_ptr<Vi> ViaSubsystem::NewViLocked(ViEntry& entry,
                                              const std::shared_ptr<ViEntry>& shared,
                                              bool initiated, PendingRequest* request) {
  const uint32_t window = DescriptorsPerVi(entry.class_index);
  auto vi = std::make_unique<Vi>(entry.peer, entry.class_index, window, initiated, shared);
  auto provider_vi = provider_->CreateVi(vi.get(), request);
  if (!provider_vi.ok()) {
    Log().warn("tocl via: cannot create a VI for {}: {}", entry.peer.ToString(),
               provider_vi.status().message());
    return nullptr;
  }
  vi->provider = std::move(*provider_vi);
  // Buffers first: a VI with no more descriptors than the reserve could
  // never carry data, so it is not made at all (the caller waits).
  std::vector<detail::BufferSlot*> slots;
  slots.reserve(window);
  while (slots.size() < window) {
    detail::BufferSlot* slot = pool_->TryGet(entry.class_index);
    if (slot == nullptr) break;
    slots.push_back(slot);
  }
  if (slots.size() <= kReserve) {
    for (detail::BufferSlot* slot : slots) pool_->Unref(slot);
    return vi;  // posted == 0
  }
  for (detail::BufferSlot* slot : slots) {
    if (!vi->provider
             ->PostRecv({slot, static_cast<uint32_t>(buffers::ClassBytes(slot->class_index)), 0})
             .ok()) {
      pool_->Unref(slot);
      continue;
    }
    pool_->CountProvided(entry.class_index, 1);
    ++vi->posted;
  }
  // What the pool could not give now is posted when it can (RepostOwed).
  vi->owed = window - vi->posted;
  owed_total_.fetch_add(vi->owed, std::memory_order_relaxed);
  return vi;
}

void ViaSubsystem::OpenViLocked(ViEntry& entry, const std::shared_ptr<ViEntry>& shared) {
  std::unique_ptr<Vi> vi = NewViLocked(entry, shared, /*initiated=*/true, nullptr);
  if (!vi) {
    FailPendingLocked(entry,
                      Unavailable(fmt::format("cannot create a VI to {}", entry.peer.ToString())));
    entry.broken = Unavailable(fmt::format("cannot create a VI to {}", entry.peer.ToString()));
    return;
  }
  if (vi->posted == 0) {
    // No descriptors to post: a peer could never send on it. Wait for memory.
    Log().debug("tocl via: no buffer to post for a VI to {}", entry.peer.ToString());
    vi->provider.reset();
    return;
  }
  ConnectData data{.process = options_.self_process,
                   .peer = entry.peer,
                   .class_index = entry.class_index,
                   .posted = vi->posted};
  // Registered before the request: OnClosed may follow at once.
  Vi* raw = vi.get();
  entry.vi = raw;
  AddVi(std::move(vi));
  if (Status status = raw->provider->ConnectRequest(entry.address, data); !status.ok()) {
    // Disconnect reports OnClosed, which fails the entry's sends.
    raw->provider->Disconnect(status.message());
  }
}

void ViaSubsystem::AddVi(std::unique_ptr<Vi> vi) {
  std::lock_guard lock(vis_mu_);
  vis_.push_back(std::shared_ptr<Vi>(std::move(vi)));
  vi_count_.store(vis_.size(), std::memory_order_relaxed);
}

void ViaSubsystem::FlushLocked(ViEntry& entry) {
  Vi* vi = entry.vi;
  if (vi == nullptr || vi->state != Vi::State::kConnected || vi->close_sent) return;
  while (!entry.pending.empty() && (vi->credits > kReserve || options_.ignore_credits)) {
    detail::BufferSlot* slot = entry.pending.front();
    const uint32_t length = static_cast<uint32_t>(wire::kHeaderBytes + slot->header().length);
    if (!SendLocked(*vi, slot, length, ViMessage::kData).ok()) return;  // OnClosed follows
    entry.pending.pop_front();
    entry.pending_bytes -= length;
  }
}

Status ViaSubsystem::SendLocked(Vi& vi, detail::BufferSlot* slot, uint32_t length, ViMessage kind) {
  const uint32_t returned = std::min(vi.to_return, kMaxCreditsPerMessage);
  const Descriptor descriptor{slot, length, EncodeImmediate(kind, returned)};
  vi.in_flight.fetch_add(1, std::memory_order_relaxed);
  bool done_now = false;
  if (Status status = vi.provider->PostSend(descriptor, &done_now); !status.ok()) {
    vi.in_flight.fetch_sub(1, std::memory_order_release);
    return status;
  }
  vi.to_return -= returned;
  if (vi.credits > 0) --vi.credits;
  ++vi.sent;
  vi.last_used = Clock::now();
  if (done_now) {
    vi.in_flight.fetch_sub(1, std::memory_order_release);
    CompleteSend(slot, /*ok=*/true);
  }
  return Status::Ok();
}

void ViaSubsystem::SendControlLocked(Vi& vi) {
  if (vi.state != Vi::State::kConnected || vi.close_sent) return;
  if (vi.close_pending) {
    if (vi.credits < 1) return;  // the reserve: the peer's credits will come
    const ViMessage kind = vi.close_received ? ViMessage::kCloseAck : ViMessage::kCloseRequest;
    if (!SendLocked(vi, &control_slot_, 0, kind).ok()) return;
    vi.close_pending = false;
    vi.close_sent = true;
    // Requests that crossed: the peer's request was its last message.
    if (vi.closing && vi.close_received) DisconnectWhenDrained(vi);
    return;
  }
  // A quarter window re-posted, or so little announced that the peer may
  // be down to its reserve (a window the pool could not fill, descriptors
  // owed while congested).
  const bool peer_may_wait =
      vi.to_return > 0 && vi.posted - std::min(vi.posted, vi.to_return) <= kReserve + 1;
  if ((vi.to_return >= CreditThreshold(vi.window) || peer_may_wait) && vi.credits >= 2) {
    (void)SendLocked(vi, &control_slot_, 0, ViMessage::kCredit);
  }
}

void ViaSubsystem::DisconnectWhenDrained(Vi& vi) {
  // Our last messages may still be on their way (a socket buffer, an
  // unacknowledged work request): disconnecting now would fail them.
  if (!vi.disconnect_pending) {
    vi.disconnect_pending = true;
    draining_.push_back(&vi);
  }
}

void ViaSubsystem::DisconnectDrained() {
  std::erase_if(draining_, [](Vi* vi) {
    std::lock_guard lock(vi->entry->mu);
    if (vi->state == Vi::State::kClosed) return true;
    if (vi->in_flight.load(std::memory_order_acquire) != 0) return false;
    vi->provider->Disconnect("closed (least recently used)");
    return true;
  });
}

void ViaSubsystem::CompleteSend(detail::BufferSlot* slot, bool ok) {
  if (slot == &control_slot_) return;
  slot->set_state(ok ? BufferState::kSent : BufferState::kFailed);
  slot->pool->Unref(slot);
}

void ViaSubsystem::FailPendingLocked(ViEntry& entry, const Status& why) {
  if (!entry.pending.empty()) {
    Log().debug("tocl via: {} sends to {} fail: {}", entry.pending.size(), entry.peer.ToString(),
                why.message());
  }
  for (detail::BufferSlot* slot : entry.pending) CompleteSend(slot, /*ok=*/false);
  entry.pending.clear();
  entry.pending_bytes = 0;
}

Status ViaSubsystem::PostOnClass(Route& route, detail::BufferSlot* slot, uint32_t class_index) {
  if (class_index >= options_.num_classes) return InvalidArgument("no such class");
  return static_cast<ViaRoute&>(route).PostOn(slot, class_index);
}

// --- completions --------------------------------------------------------------

void ViaSubsystem::OnSendDone(void* context, detail::BufferSlot* slot, const Status& status) {
  auto* vi = static_cast<Vi*>(context);
  CompleteSend(slot, status.ok());
  vi->in_flight.fetch_sub(1, std::memory_order_release);
}

Status ViaSubsystem::CheckFrame(const Vi& vi, detail::BufferSlot* slot, uint32_t length) const {
  auto header = wire::DecodeHeader(std::span<const std::byte>(slot->bytes, length), limits_);
  if (!header.ok()) return header.status();
  if (wire::kHeaderBytes + header->length != length) {
    return InvalidArgument(fmt::format("a message of {} bytes whose header says {}", length,
                                       wire::kHeaderBytes + header->length));
  }
  if (wire::HandshakePayloadBytes(header->kind) != 0) {
    return InvalidArgument("a tcp handshake frame on a VI");
  }
  if (Gid::FromRaw(header->source).process() != vi.peer) {
    return InvalidArgument(fmt::format("a message from {} on the VI of {}",
                                       Gid::FromRaw(header->source).ToString(),
                                       vi.peer.ToString()));
  }
  if (Gid::FromRaw(header->destination).process() != options_.self_process) {
    return InvalidArgument(fmt::format("a message for {}, but this is {}",
                                       Gid::FromRaw(header->destination).ToString(),
                                       options_.self_process.ToString()));
  }
  return Status::Ok();
}

void ViaSubsystem::OnRecvDone(void* context, detail::BufferSlot* slot, uint32_t length,
                              uint32_t immediate, const Status& status) {
  Vi& vi = *static_cast<Vi*>(context);
  ViEntry& entry = *vi.entry;
  pool_->CountProvided(vi.class_index, -1);
  std::unique_lock lock(entry.mu);
  --vi.posted;
  if (!status.ok()) {
    pool_->Unref(slot);
    return;  // the VI is broken; OnClosed follows
  }
  ++vi.received;
  vi.last_used = Clock::now();
  ViMessage kind;
  if (!ImmediateKind(immediate, &kind)) {
    pool_->Unref(slot);
    Log().warn("tocl via: {} sent a message of unknown kind {:#x}; closing its VI",
               vi.peer.ToString(), immediate >> 16);
    vi.provider->Disconnect("a message of unknown kind");
    return;
  }
  vi.credits += ImmediateCredits(immediate);
  switch (kind) {
    case ViMessage::kData: {
      if (Status bad = CheckFrame(vi, slot, length); !bad.ok()) {
        pool_->Unref(slot);
        Log().warn("tocl via: closing the VI of {}: {}", vi.peer.ToString(), bad.message());
        vi.provider->Disconnect(bad.message());
        return;
      }
      // Delivered without the entry's lock: the runtime may send from here.
      lock.unlock();
      ++delivered_;
      Status taken = sink_.OnMessage(vi.peer, buffers::SlotRef(slot));
      lock.lock();
      if (!taken.ok()) {
        Log().warn("tocl via: closing the VI of {}: {}", vi.peer.ToString(), taken.message());
        vi.provider->Disconnect(taken.message());
        return;
      }
      RepostLocked(vi, nullptr);
      break;
    }
    case ViMessage::kCredit:
      RepostLocked(vi, slot);
      break;
    case ViMessage::kCloseRequest:
    case ViMessage::kCloseAck:
      RepostLocked(vi, slot);
      vi.close_received = true;
      if (entry.vi == &vi) entry.vi = nullptr;  // later sends open a new VI
      vi.detached = true;
      if (vi.close_sent) {
        // It answered our request (or crossed it): everything it sent is here.
        if (vi.closing) DisconnectWhenDrained(vi);
      } else {
        vi.close_pending = true;  // our answer, after what we posted
      }
      break;
  }
  if (entry.vi == &vi) FlushLocked(entry);
  SendControlLocked(vi);
  // Sends that waited for a VI while this one was closing.
  if (entry.vi == nullptr && !entry.pending.empty() && !closing_) {
    OpenViLocked(entry, vi.entry);
  }
}

void ViaSubsystem::RepostLocked(Vi& vi, detail::BufferSlot* same) {
  if (vi.state == Vi::State::kClosed) {
    if (same != nullptr) pool_->Unref(same);
    return;
  }
  detail::BufferSlot* slot = same;
  if (slot == nullptr) {
    if (sink_.Congested() || (slot = pool_->TryGet(vi.class_index)) == nullptr) {
      ++vi.owed;
      owed_total_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  if (Status posted = vi.provider->PostRecv(
          {slot, static_cast<uint32_t>(buffers::ClassBytes(vi.class_index)), 0});
      !posted.ok()) {
    pool_->Unref(slot);
    // A full completion queue (ibverbs): post it later rather than shrink
    // the window for good. A closed VI needs no more descriptors.
    if (posted.code() == StatusCode::kResourceExhausted) {
      ++vi.owed;
      owed_total_.fetch_add(1, std::memory_order_relaxed);
    }
    return;
  }
  pool_->CountProvided(vi.class_index, 1);
  ++vi.posted;
  ++vi.to_return;
}

void ViaSubsystem::OnConnected(void* context, const ConnectData& peer) {
  Vi& vi = *static_cast<Vi*>(context);
  ViEntry& entry = *vi.entry;
  std::lock_guard lock(entry.mu);
  if (peer.process != vi.peer || peer.peer != options_.self_process ||
      peer.class_index != vi.class_index) {
    Log().warn("tocl via: {} accepted as {} for {} in class {}; closing", vi.peer.ToString(),
               peer.process.ToString(), peer.peer.ToString(), peer.class_index);
    vi.provider->Disconnect("the accept names another VI");
    return;
  }
  vi.state = Vi::State::kConnected;
  vi.credits = peer.posted;
  vis_opened_.fetch_add(1, std::memory_order_relaxed);
  if (entry.vi == &vi) {
    FlushLocked(entry);
  } else if (!vi.close_sent) {
    // Superseded while it connected (the peer's crossing request won here
    // too): close it without losing anything.
    vi.detached = true;
    vi.closing = true;
    vi.close_pending = true;
    SendControlLocked(vi);
  }
}

void ViaSubsystem::OnClosed(void* context, const Status& why) {
  Vi& vi = *static_cast<Vi*>(context);
  ViEntry& entry = *vi.entry;
  std::lock_guard lock(entry.mu);
  const bool connected = vi.state == Vi::State::kConnected;
  vi.state = Vi::State::kClosed;
  owed_total_.fetch_sub(vi.owed, std::memory_order_relaxed);
  vi.owed = 0;
  const bool expected = closing_ || vi.close_received || vi.detached;
  if (entry.vi == &vi) entry.vi = nullptr;
  closed_.push_back(&vi);
  if (expected) return;
  if (!connected && why.message().ends_with(kCrossed)) {
    // The peer's request won; its VI arrives through our connection manager.
    entry.crossed_at = Clock::now();
    return;
  }
  if (!connected && why.message().find(kBusy) != std::string::npos) {
    entry.crossed_at = Clock::now();  // the same wait, then Housekeeping asks again
    return;
  }
  Log().debug("tocl via: the VI to {} (class {}) closed: {}", vi.peer.ToString(),
              buffers::ClassBytes(vi.class_index), why.message());
  entry.broken = why.ok() ? Unavailable("the VI closed") : why;
  FailPendingLocked(entry, entry.broken);
}

// --- connection manager -------------------------------------------------------

void ViaSubsystem::ServeConnections() {
  while (!stop_.load()) {
    auto request = provider_->ConnectWait(Clock::now() + std::chrono::seconds(1));
    if (!request.ok()) {
      if (request.status().code() == StatusCode::kCancelled) {
        if (stop_.load()) return;
        continue;
      }
      if (request.status().code() != StatusCode::kDeadlineExceeded) {
        Log().warn("tocl via: connection manager: {}", request.status().message());
      }
      continue;
    }
    HandleRequest(**request);
  }
}

void ViaSubsystem::HandleRequest(PendingRequest& request) {
  const ConnectData& data = request.data();
  if (data.peer != options_.self_process) {
    provider_->ConnectReject(
        request,
        fmt::format("this is {}, not {}", options_.self_process.ToString(), data.peer.ToString()));
    return;
  }
  std::shared_ptr<ViEntry> shared = EntryFor(data.process, data.class_index);
  ViEntry& entry = *shared;
  std::lock_guard lock(entry.mu);
  Vi* old = entry.vi;
  // Ours wins a crossing even when it connected before this request was read
  // (the peer accepted ours and sends on it): accepting would detach ours
  // here while the peer keeps using its end, and neither side would close it.
  if (old != nullptr && old->initiated && old->state != Vi::State::kClosed &&
      options_.self_process < data.process) {
    provider_->ConnectReject(request, kCrossed);  // ours wins: the peer uses it
    return;
  }
  std::unique_ptr<Vi> vi = NewViLocked(entry, shared, /*initiated=*/false, &request);
  if (!vi || vi->posted == 0) {
    provider_->ConnectReject(request, kBusy);
    return;
  }
  const ConnectData reply{.process = options_.self_process,
                          .peer = data.process,
                          .class_index = data.class_index,
                          .posted = vi->posted};
  Vi* raw = vi.get();
  AddVi(std::move(vi));
  if (Status status = provider_->ConnectAccept(request, *raw->provider, reply); !status.ok()) {
    Log().warn("tocl via: cannot accept {}: {}", request.peer_address(), status.message());
    raw->detached = true;
    raw->provider->Disconnect(status.message());
    return;
  }
  raw->state = Vi::State::kConnected;
  raw->credits = data.posted;
  vis_opened_.fetch_add(1, std::memory_order_relaxed);
  if (old != nullptr) {
    // Either our own request that lost the crossing (the peer rejects it) or
    // a VI the peer is closing (its close request is on the way).
    old->detached = true;
  }
  entry.vi = raw;
  entry.crossed_at = {};
  FlushLocked(entry);
  reactor_.Wake();  // the cap is checked by the poller
}

// --- polling ------------------------------------------------------------------

std::vector<std::shared_ptr<Vi>> ViaSubsystem::SnapshotVis() const {
  std::lock_guard lock(vis_mu_);
  return vis_;
}

bool ViaSubsystem::RepostOwed() {
  if (owed_total_.load(std::memory_order_relaxed) == 0 || sink_.Congested()) return false;
  bool reposted = false;
  for (auto& vi : SnapshotVis()) {
    std::lock_guard lock(vi->entry->mu);
    while (vi->owed > 0 && vi->state != Vi::State::kClosed && !sink_.Congested()) {
      detail::BufferSlot* slot = pool_->TryGet(vi->class_index);
      if (slot == nullptr) return reposted;
      --vi->owed;
      owed_total_.fetch_sub(1, std::memory_order_relaxed);
      const uint32_t before = vi->posted;
      RepostLocked(*vi, slot);
      if (vi->posted == before) break;  // the provider refused: later
      reposted = true;
    }
    SendControlLocked(*vi);
  }
  return reposted;
}

void ViaSubsystem::CloseOverCap() {
  auto vis = SnapshotVis();
  if (vis.size() <= options_.max_vis) return;
  std::vector<std::pair<Clock::time_point, Vi*>> open;
  for (auto& vi : vis) {
    std::lock_guard lock(vi->entry->mu);
    if (vi->state == Vi::State::kConnected && !vi->detached && !vi->close_pending &&
        !vi->close_sent) {
      open.emplace_back(vi->last_used, vi.get());
    }
  }
  if (open.size() <= options_.max_vis) return;
  // Least recently used first; the choice is checked again under the lock.
  std::sort(open.begin(), open.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  size_t excess = open.size() - options_.max_vis;
  for (auto [used, vi] : open) {
    if (excess == 0) break;
    std::lock_guard lock(vi->entry->mu);
    if (vi->state != Vi::State::kConnected || vi->detached || vi->close_pending || vi->close_sent) {
      continue;
    }
    if (vi->entry->vi == vi) vi->entry->vi = nullptr;
    vi->detached = true;
    vi->closing = true;
    vi->close_pending = true;
    vis_closed_.fetch_add(1, std::memory_order_relaxed);
    SendControlLocked(*vi);
    --excess;
  }
}

void ViaSubsystem::FreeClosed() {
  if (closed_.empty()) return;
  std::vector<Vi*> closed;
  closed.swap(closed_);
  std::erase_if(draining_, [&](Vi* vi) {
    return std::find(closed.begin(), closed.end(), vi) != closed.end();
  });
  // The provider VIs go here, on the polling thread, between reactor batches.
  for (Vi* vi : closed) vi->provider.reset();
  std::lock_guard lock(vis_mu_);
  std::erase_if(vis_, [&](const std::shared_ptr<Vi>& vi) {
    return std::find(closed.begin(), closed.end(), vi.get()) != closed.end();
  });
  vi_count_.store(vis_.size(), std::memory_order_relaxed);
}

int ViaSubsystem::Poll() {
  provider_->Poll();
  RepostOwed();
  // Cheap to test: the count includes VIs already closing.
  if (vi_count_.load(std::memory_order_relaxed) > options_.max_vis) CloseOverCap();
  if (!draining_.empty()) DisconnectDrained();
  if (!closed_.empty()) FreeClosed();
  return std::exchange(delivered_, 0);
}

bool ViaSubsystem::PrepareToSleep() {
  if (RepostOwed()) return false;
  if (!draining_.empty()) DisconnectDrained();
  return provider_->PrepareToSleep() && delivered_ == 0;
}

void ViaSubsystem::Housekeeping() {
  CloseOverCap();
  std::vector<std::shared_ptr<ViEntry>> entries;
  {
    std::lock_guard lock(entries_mu_);
    for (auto& [key, entry] : entries_) entries.push_back(entry);
  }
  const auto now = Clock::now();
  for (auto& entry : entries) {
    std::lock_guard lock(entry->mu);
    if (entry->vi == nullptr && !entry->pending.empty() && entry->broken.ok() && !closing_ &&
        now - entry->crossed_at >= kCrossedRetry) {
      OpenViLocked(*entry, entry);
    }
  }
  FreeClosed();
}

size_t ViaSubsystem::open_vis() const {
  size_t open = 0;
  for (auto& vi : SnapshotVis()) {
    std::lock_guard lock(vi->entry->mu);
    if (vi->state != Vi::State::kClosed) ++open;
  }
  return open;
}

std::vector<ViStats> ViaSubsystem::ViPool() const {
  std::vector<std::pair<Clock::time_point, ViStats>> rows;
  for (auto& vi : SnapshotVis()) {
    std::lock_guard lock(vi->entry->mu);
    if (vi->state == Vi::State::kClosed) continue;
    ViStats stats;
    stats.peer = vi->peer;
    stats.class_bytes = static_cast<uint32_t>(buffers::ClassBytes(vi->class_index));
    stats.state = vi->detached || vi->close_pending || vi->close_sent ? "closing"
                  : vi->state == Vi::State::kConnected                ? "connected"
                                                                      : "connecting";
    stats.posted = vi->posted;
    stats.credits = vi->credits;
    stats.queued = vi->entry->vi == vi.get() ? static_cast<uint32_t>(vi->entry->pending.size()) : 0;
    stats.sent = vi->sent;
    stats.received = vi->received;
    rows.emplace_back(vi->last_used, std::move(stats));
  }
  std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.first > b.first; });
  std::vector<ViStats> out;
  out.reserve(rows.size());
  for (auto& row : rows) out.push_back(std::move(row.second));
  return out;
}

void ViaSubsystem::Close() {
  if (closing_) return;
  closing_ = true;
  stop_.store(true);
  // Open failed before a provider was opened: there is nothing to close.
  if (!provider_) return;
  provider_->InterruptWait();
  if (connection_manager_.joinable()) connection_manager_.join();
  provider_->Close();  // OnClosed for every VI
  std::vector<std::shared_ptr<ViEntry>> entries;
  {
    std::lock_guard lock(entries_mu_);
    for (auto& [key, entry] : entries_) entries.push_back(entry);
  }
  for (auto& entry : entries) {
    std::lock_guard lock(entry->mu);
    FailPendingLocked(*entry, Unavailable("the via subsystem is closed"));
    entry->broken = Unavailable("the via subsystem is closed");
  }
  FreeClosed();
}

}  // namespace tocl::subsystem::via
