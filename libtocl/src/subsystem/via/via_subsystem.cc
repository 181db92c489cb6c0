#include "subsystem/via/via_subsystem.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cstring>
#include <utility>

#include "buffers/size_class.h"
#include "core/logger.h"
#include "subsystem/reconnect_backoff.h"
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
// The longest an acknowledgement waits for a message to ride on while the
// poller runs (it never waits past the poller's sleep).
constexpr auto kAckDelay = std::chrono::microseconds(200);

uint64_t EntryKey(Gid peer, uint32_t class_index) {
  return peer.raw() | class_index;  // a process id has 24 zero thread bits
}

std::string Describe(const ViEntry& entry) {
  return fmt::format("{} (class {} B)", entry.peer.ToString(),
                     buffers::ClassBytes(entry.class_index));
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
    // Frames still held for this peer fail with the route; its VIs stay in
    // the pool (they belong to the process, not to the route).
    for (auto& entry : entries_) {
      if (!entry) continue;
      std::lock_guard lock(entry->mu);
      if (entry->streams.window().empty()) continue;
      Log().debug("tocl via: {} frames to {} fail: the route was dropped",
                  entry->streams.window().size(), Describe(*entry));
      entry->streams.window().Fail();
      // The VI's numbers no longer follow the window's.
      owner_.DropViLocked(*entry, "the route was dropped");
      // Down with nothing to send would keep the poller's timer on it, and
      // the next route's first Post would find the old down_since.
      owner_.IdleLocked(*entry);
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
      if (!entry->streams.window().empty()) return false;
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

  bool Down() const override {
    for (auto& entry : entries_) {
      if (!entry) continue;
      std::lock_guard lock(entry->mu);
      if (entry->down) return true;
    }
    return false;
  }

  std::vector<buffers::SlotRef> TakeUnacknowledged() override {
    std::vector<buffers::SlotRef> frames;
    for (auto& entry : entries_) {
      if (!entry) continue;
      std::lock_guard lock(entry->mu);
      for (detail::BufferSlot* slot : owner_.TakeLocked(*entry)) frames.emplace_back(slot);
    }
    return frames;
  }

  void Abandon(std::string_view why) override {
    for (auto& entry : entries_) {
      if (!entry) continue;
      std::lock_guard lock(entry->mu);
      owner_.BreakLocked(*entry, Unavailable(std::string(why)), /*warn=*/false);
    }
  }

 private:
  std::shared_ptr<ViEntry>& Entry(uint32_t class_index) {
    std::shared_ptr<ViEntry>& entry = entries_[class_index];
    if (!entry) {
      entry = owner_.EntryFor(peer_, class_index);
      std::lock_guard lock(entry->mu);
      entry->address = address_;
      if (!entry->broken.ok()) {
        // A new route is a new attempt: a new stream, which the peer takes
        // even if it refused the old one. Its VI carried the old stream.
        owner_.DropViLocked(*entry, "the route starts again");
        entry->broken = Status::Ok();
        entry->streams.Renew();
        entry->resumed_once = false;
        entry->attempts = 0;
        entry->next_attempt = {};
      }
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
  if (options.unreachable_timeout.count() <= 0) {
    return InvalidArgument("via: the unreachable timeout must be positive");
  }
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

std::vector<std::shared_ptr<ViEntry>> ViaSubsystem::SnapshotEntries() const {
  std::vector<std::shared_ptr<ViEntry>> entries;
  std::lock_guard lock(entries_mu_);
  entries.reserve(entries_.size());
  for (auto& [key, entry] : entries_) entries.push_back(entry);
  return entries;
}

// --- sending ------------------------------------------------------------------

Status ViaSubsystem::PostLocked(ViEntry& entry, detail::BufferSlot* slot, bool check_room) {
  if (!entry.broken.ok()) return Unavailable(entry.broken.message());
  if (stop_.load(std::memory_order_relaxed)) return Unavailable("the via subsystem is closed");
  tcp::SendWindow& window = entry.streams.window();
  const size_t bytes = wire::kHeaderBytes + slot->header().length;
  // An empty window takes any frame, so that one bigger than the limit
  // still goes.
  if (check_room && !window.empty() &&
      window.bytes() + bytes > options_.max_queued_bytes_per_route) {
    return Status(StatusCode::kTryAgain, "send window full");
  }
  slot->set_state(BufferState::kInFlight);
  window.Push({slot, bytes});
  // An entry is down only while frames wait (LoseLocked): an idle one
  // without a VI connects now.
  if (entry.vi == nullptr) OpenIfDueLocked(entry);
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

void ViaSubsystem::OpenIfDueLocked(ViEntry& entry) {
  const tcp::SendWindow& window = entry.streams.window();
  if (entry.vi != nullptr || !entry.broken.ok() || stop_.load(std::memory_order_relaxed) ||
      window.unwritten() == window.size()) {
    return;
  }
  // The clock is read only when a VI is wanted, not per frame.
  if (entry.next_attempt == Clock::time_point{} || Clock::now() >= entry.next_attempt) {
    OpenViLocked(entry);
  }
}

void ViaSubsystem::OpenViLocked(ViEntry& entry) {
  // The shared_ptr of an entry is held by every route using it.
  std::unique_ptr<Vi> vi =
      NewViLocked(entry, EntryFor(entry.peer, entry.class_index), /*initiated=*/true, nullptr);
  if (!vi) {
    BreakLocked(entry, Unavailable(fmt::format("cannot create a VI to {}", entry.peer.ToString())),
                /*warn=*/true);
    return;
  }
  if (vi->posted == 0) {
    // No descriptors to post: a peer could never send on it. Wait for memory.
    Log().debug("tocl via: no buffer to post for a VI to {}", entry.peer.ToString());
    vi->provider.reset();
    entry.next_attempt = Clock::now() + kCrossedRetry;
    return;
  }
  ConnectData data{.process = options_.self_process,
                   .peer = entry.peer,
                   .class_index = entry.class_index,
                   .posted = vi->posted,
                   .epoch = entry.epoch};
  entry.streams.Describe(data);
  vi->request = data;
  vi->epoch = entry.epoch + 1;
  // Registered before the request: OnClosed may follow at once.
  Vi* raw = vi.get();
  entry.vi = raw;
  AddVi(std::move(vi));
  if (Status status = raw->provider->ConnectRequest(entry.address, data); !status.ok()) {
    // Disconnect reports OnClosed, which decides what follows.
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
  tcp::SendWindow& window = entry.streams.window();
  while (window.unwritten() < window.size() &&
         (vi->credits > kReserve || options_.ignore_credits)) {
    const tcp::SendWindow::Entry& frame = window[window.unwritten()];
    const Status status = SendFrameLocked(*vi, frame.slot, static_cast<uint32_t>(frame.bytes));
    if (status.code() == StatusCode::kTryAgain) {
      flush_blocked_.store(true, std::memory_order_relaxed);
      return;
    }
    if (!status.ok()) return;  // OnClosed follows
    window.Written(frame.bytes);
    ++vi->send_posted;
  }
}

Status ViaSubsystem::SendFrameLocked(Vi& vi, detail::BufferSlot* slot, uint32_t length) {
  detail::BufferSlot* sent = slot;
  if (provider_->needs_registered_memory() && slot->pool != pool_.get()) {
    // Another network's buffer (moved here from a broken one): the provider
    // sends only registered memory. The window keeps the original, whose
    // state is the sender's to see.
    sent = pool_->TryGet(slot->class_index);
    if (sent == nullptr) return Status(StatusCode::kTryAgain, "via pool at its cap");
    std::memcpy(sent->bytes, slot->bytes, length);
  } else {
    // The provider's reference: the peer may acknowledge a frame before
    // its send completes here.
    slot->refs.fetch_add(1, std::memory_order_relaxed);
  }
  Status status = SendLocked(vi, sent, length, ViMessage::kData);
  if (!status.ok()) ReleaseSent(sent);  // the provider's reference, in whichever pool it is
  return status;
}

Status ViaSubsystem::SendLocked(Vi& vi, detail::BufferSlot* slot, uint32_t length, ViMessage kind) {
  const uint32_t returned = std::min(vi.to_return, kMaxCreditsPerMessage);
  const Descriptor descriptor{slot, length, EncodeImmediate(kind, returned, vi.receive_count)};
  vi.in_flight.fetch_add(1, std::memory_order_relaxed);
  bool done_now = false;
  if (Status status = vi.provider->PostSend(descriptor, &done_now); !status.ok()) {
    vi.in_flight.fetch_sub(1, std::memory_order_release);
    return status;
  }
  vi.to_return -= returned;
  vi.receive_reported = vi.receive_count;
  ClearAckOwedLocked(vi);
  if (vi.credits > 0) --vi.credits;
  ++vi.sent;
  if (kind == ViMessage::kData) vi.last_used = Clock::now();
  if (done_now) {
    vi.in_flight.fetch_sub(1, std::memory_order_release);
    ReleaseSent(slot);
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
    ClearAckOwedLocked(vi);  // nothing more goes out on it
    // Requests that crossed: the peer's request was its last message.
    if (vi.closing && vi.close_received) DisconnectWhenDrained(vi);
    return;
  }
  // A quarter window re-posted or received, or so little announced that
  // the peer may be down to its reserve (a window the pool could not fill,
  // descriptors owed while congested).
  const uint32_t threshold = CreditThreshold(vi.window);
  const bool peer_may_wait =
      vi.to_return > 0 && vi.posted - std::min(vi.posted, vi.to_return) <= kReserve + 1;
  if ((vi.to_return >= threshold || peer_may_wait ||
       vi.receive_count - vi.receive_reported >= threshold) &&
      vi.credits >= 2) {
    (void)SendLocked(vi, &control_slot_, 0, ViMessage::kCredit);
  }
}

void ViaSubsystem::SendAckLocked(Vi& vi) {
  if (!vi.ack_owed) return;
  if (vi.state != Vi::State::kConnected || vi.close_sent) {
    ClearAckOwedLocked(vi);  // nothing more can go on it
    return;
  }
  // Without credits it waits: the peer's next message brings some.
  if (vi.credits >= 2) (void)SendLocked(vi, &control_slot_, 0, ViMessage::kCredit);
}

void ViaSubsystem::NoteAckOwedLocked(Vi& vi) {
  if (vi.ack_owed) return;
  vi.ack_owed = true;
  vi.ack_owed_since = {};
  std::lock_guard lock(owing_mu_);
  owing_.push_back(&vi);
  acks_owed_.store(owing_.size(), std::memory_order_relaxed);
}

void ViaSubsystem::ClearAckOwedLocked(Vi& vi) {
  if (!vi.ack_owed) return;
  vi.ack_owed = false;
  std::lock_guard lock(owing_mu_);
  std::erase(owing_, &vi);
  acks_owed_.store(owing_.size(), std::memory_order_relaxed);
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

void ViaSubsystem::ReleaseSent(detail::BufferSlot* slot) {
  if (slot != &control_slot_) slot->pool->Unref(slot);
}

Status ViaSubsystem::PostOnClass(Route& route, detail::BufferSlot* slot, uint32_t class_index) {
  if (class_index >= options_.num_classes) return InvalidArgument("no such class");
  return static_cast<ViaRoute&>(route).PostOn(slot, class_index);
}

// --- completions --------------------------------------------------------------

void ViaSubsystem::OnSendDone(void* context, detail::BufferSlot* slot, const Status& /*status*/) {
  auto* vi = static_cast<Vi*>(context);
  // Failed or not, the frame stays in its window until the peer has it.
  ReleaseSent(slot);
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
  if (!wire::SourceFits(*header, vi.peer)) {
    return InvalidArgument(fmt::format("a message from {} on the VI of {}",
                                       Gid::FromRaw(header->source).ToString(),
                                       vi.peer.ToString()));
  }
  if (!wire::DestinationFits(*header, options_.self_process)) {
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
  if (vi.state == Vi::State::kConnecting || !vi.early.empty()) {
    // The peer's first messages may complete before our connection event
    // (ibverbs: separate queues); they are numbered from what it says.
    // Behind them while they are being handed on (OnConnected).
    vi.early.push_back({slot, length, immediate});
    return;
  }
  ReceiveLocked(lock, vi, slot, length, immediate);
}

void ViaSubsystem::ReceiveLocked(std::unique_lock<std::mutex>& lock, Vi& vi,
                                 detail::BufferSlot* slot, uint32_t length, uint32_t immediate) {
  ViEntry& entry = *vi.entry;
  if (vi.refused || vi.state != Vi::State::kConnected) {
    pool_->Unref(slot);  // completed before the provider saw our disconnect
    return;
  }
  ++vi.received;
  ViMessage kind;
  if (!ImmediateKind(immediate, &kind)) {
    pool_->Unref(slot);
    RefuseLocked(entry, vi, fmt::format("a message of unknown kind {:#x}", immediate >> 28));
    return;
  }
  vi.credits += ImmediateCredits(immediate);
  if (vi.credits > kMaxDescriptorsPerVi) {
    // More than any VI posts: a broken peer (its counts could wrap).
    pool_->Unref(slot);
    RefuseLocked(entry, vi, fmt::format("{} credits, more than a VI has descriptors", vi.credits));
    return;
  }
  if (Status acked = AcknowledgeLocked(entry, vi, ImmediateReceived(immediate)); !acked.ok()) {
    pool_->Unref(slot);
    RefuseLocked(entry, vi, acked.message());
    return;
  }
  switch (kind) {
    case ViMessage::kData: {
      if (Status bad = CheckFrame(vi, slot, length); !bad.ok()) {
        pool_->Unref(slot);
        RefuseLocked(entry, vi, bad.message());
        return;
      }
      // Data, not credits and acknowledgements, keeps a VI in use (the
      // cap closes the least recently used).
      vi.last_used = Clock::now();
      if (vi.peer_stream != entry.streams.peer_stream()) {
        // A stream the peer gave up (it failed its frames and began anew).
        RepostLocked(vi, slot);
        break;
      }
      ++vi.receive_count;
      NoteAckOwedLocked(vi);
      const Result<bool> fresh = entry.streams.Arrived(vi.receive_next++);
      if (!fresh.ok()) {
        pool_->Unref(slot);
        RefuseLocked(entry, vi, fresh.status().message());
        return;
      }
      if (!*fresh) {
        // It came on the VI that replaced this one already.
        duplicates_.fetch_add(1, std::memory_order_relaxed);
        RepostLocked(vi, slot);
        break;
      }
      // Delivered without the entry's lock: the runtime may send from here.
      lock.unlock();
      ++delivered_;
      Status taken = sink_.OnMessage(vi.peer, buffers::SlotRef(slot));
      lock.lock();
      if (!taken.ok()) {
        RefuseLocked(entry, vi, taken.message());
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
  if (entry.vi == nullptr) OpenIfDueLocked(entry);
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
  std::unique_lock lock(entry.mu);
  OnConnectedLocked(vi, peer);
  // What completed before this event, now that its numbers are known. One
  // at a time: ReceiveLocked lets go of the lock to hand a frame on, and a
  // completion meanwhile queues behind the rest (OnRecvDone) rather than
  // take the number of the next one here.
  while (!vi.early.empty()) {
    const Vi::Early early = vi.early.front();
    vi.early.erase(vi.early.begin());
    ReceiveLocked(lock, vi, early.slot, early.length, early.immediate);
  }
}

void ViaSubsystem::OnConnectedLocked(Vi& vi, const ConnectData& peer) {
  ViEntry& entry = *vi.entry;
  if (peer.process != vi.peer || peer.peer != options_.self_process ||
      peer.class_index != vi.class_index) {
    Log().warn("tocl via: {} accepted as {} for {} in class {}; closing", vi.peer.ToString(),
               peer.process.ToString(), peer.peer.ToString(), peer.class_index);
    vi.provider->Disconnect("the accept names another VI");
    return;
  }
  vi.state = Vi::State::kConnected;
  vi.credits = peer.posted;
  vi.epoch = peer.epoch;
  vis_opened_.fetch_add(1, std::memory_order_relaxed);
  // Superseded or not, the peer numbers what it sends on it from here.
  const Result<StreamPair::Resume> resume = AgreeLocked(entry, vi, vi.request, peer);
  if (!resume.ok()) {
    RefuseLocked(entry, vi, resume.status().message());
    return;
  }
  if (entry.vi == &vi) {
    ResumeLocked(entry, vi, *resume);
  } else if (!vi.close_sent) {
    // Superseded while it connected (the peer's crossing request won here
    // too, or its frames went another way): close it without losing anything.
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
  ClearAckOwedLocked(vi);
  for (const Vi::Early& early : std::exchange(vi.early, {})) pool_->Unref(early.slot);
  const bool current = entry.vi == &vi;
  if (current) entry.vi = nullptr;
  closed_.push_back(&vi);
  if (closing_) return;
  if (current && why.code() == StatusCode::kInvalidArgument) {
    // Our provider caught the peer breaking VIA's rules.
    RefuseLocked(entry, vi, why.message());
    return;
  }
  if (!entry.broken.ok()) return;
  if (!current) {
    // A VI that had left its entry (closed by the cap, superseded): what its
    // close left unacknowledged needs a VI of its own.
    if (entry.vi == nullptr && !entry.streams.window().empty()) {
      entry.streams.window().Rewind();
      OpenIfDueLocked(entry);
    }
    return;
  }
  if (!connected) {
    if (why.message().ends_with(kCrossed) || why.message().find(kBusy) != std::string::npos) {
      // A crossing lost (the peer's VI arrives through our connection
      // manager) or no buffers there now: ask again later.
      entry.next_attempt = Clock::now() + kCrossedRetry;
      return;
    }
    // Refused, or no tocl process of this cluster before the stream ever
    // resumed: there is nobody to connect to again.
    if (why.code() == StatusCode::kFailedPrecondition ||
        why.code() == StatusCode::kPermissionDenied ||
        (why.code() == StatusCode::kNotFound && !entry.resumed_once)) {
      BreakLocked(entry, why, /*warn=*/true);
      return;
    }
  }
  LoseLocked(entry, why);
}

// --- the streams across VIs -------------------------------------------------------

Result<StreamPair::Resume> ViaSubsystem::AgreeLocked(ViEntry& entry, Vi& vi,
                                                     const ConnectData& ours,
                                                     const ConnectData& theirs) {
  const uint64_t before = entry.streams.peer_stream();
  TOCL_ASSIGN_OR_RETURN(const StreamPair::Resume resume, entry.streams.Agree(ours, theirs));
  NumberLocked(entry, vi, resume);
  if (before != 0 && entry.streams.peer_stream() != before) DropStreamLocked(entry, vi, before);
  return resume;
}

void ViaSubsystem::DropStreamLocked(ViEntry& entry, const Vi& keep, uint64_t peer_stream) {
  // What they still carry is neither counted nor acknowledged, so their
  // sender must see them go (it sends it again, or it gave the stream up).
  for (const auto& vi : SnapshotVis()) {
    if (vi.get() == &keep || vi->entry.get() != &entry || vi->state == Vi::State::kClosed ||
        vi->peer_stream != peer_stream) {
      continue;
    }
    if (entry.vi == vi.get()) entry.vi = nullptr;
    vi->detached = true;
    vi->provider->Disconnect("the peer's stream began anew");
  }
}

void ViaSubsystem::NumberLocked(ViEntry& entry, Vi& vi, const StreamPair::Resume& resume) {
  vi.stream = entry.streams.stream();
  vi.peer_stream = entry.streams.peer_stream();
  vi.send_first = resume.send_from;
  vi.receive_next = resume.receive_from;
}

void ViaSubsystem::ResumeLocked(ViEntry& entry, Vi& vi, const StreamPair::Resume& resume) {
  tcp::SendWindow& window = entry.streams.window();
  // Acknowledgements from other VIs stopped at the base our data announced
  // (AcknowledgeLocked), so the window still holds every frame from here.
  assert(resume.send_from >= window.base());
  if (resume.send_from > window.base()) window.Acknowledge(resume.send_from);
  window.Rewind();
  entry.epoch = vi.epoch;
  entry.resumed_once = true;
  entry.attempts = 0;
  entry.next_attempt = {};
  if (entry.down) {
    SetUpLocked(entry);
    vis_restored_.fetch_add(1, std::memory_order_relaxed);
    Log().warn(
        "tocl via: the VI to {} restored after {} ms; {} frames sent again", Describe(entry),
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - entry.down_since)
            .count(),
        window.size());
  }
  FlushLocked(entry);
}

Status ViaSubsystem::AcknowledgeLocked(ViEntry& entry, Vi& vi, uint32_t low) {
  if (vi.stream != entry.streams.stream()) return Status::Ok();  // a stream we gave up
  const uint64_t more = (low - vi.send_acked) & kAckMask;
  if (more == 0) return Status::Ok();
  if (vi.send_acked + more > vi.send_posted) {
    return InvalidArgument(fmt::format("{} frames acknowledged on a VI that carried {}",
                                       vi.send_acked + more, vi.send_posted));
  }
  vi.send_acked += more;
  uint64_t count = vi.send_first + vi.send_acked;
  tcp::SendWindow& window = entry.streams.window();
  if (const Vi* current = entry.vi; current != nullptr && current != &vi) {
    // Not past the entry's VI: it numbers its frames from where it
    // started (or the base its request announced), and sends them all.
    const uint64_t from = current->state == Vi::State::kConnected
                              ? current->send_first + current->send_posted
                              : WidenCount(window.base(), current->request.base);
    count = std::min(count, from);
  }
  if (count > window.base()) window.Acknowledge(count);
  // A VI that left the entry while it was down may acknowledge the rest.
  if (entry.down && window.empty()) IdleLocked(entry);
  return Status::Ok();
}

void ViaSubsystem::LoseLocked(ViEntry& entry, const Status& why) {
  tcp::SendWindow& window = entry.streams.window();
  const auto now = Clock::now();
  window.Rewind();
  // A failed attempt to make it again is not another loss.
  if (!entry.down) vis_lost_.fetch_add(1, std::memory_order_relaxed);
  if (window.empty()) {
    // Nothing waits: the entry is idle, not down (a peer that exited
    // closes its VIs). Down would keep the poller's timers running for it
    // and make the route look down to the runtime's failover. The next
    // Post connects at once; a peer on its way out is not called back.
    Log().debug("tocl via: the VI to {} was lost with nothing to send: {}", Describe(entry),
                why.message());
    IdleLocked(entry);
    return;
  }
  if (!entry.down) {
    entry.down = true;
    entry.down_since = now;
    entry.attempts = 0;
    down_count_.fetch_add(1, std::memory_order_relaxed);
    Log().warn("tocl via: the VI to {} was lost: {}; connecting again, {} frames wait",
               Describe(entry), why.message(), window.size());
  } else {
    Log().debug("tocl via: attempt {} to reach {} again failed: {}", entry.attempts,
                Describe(entry), why.message());
  }
  // The runtime may move the frames to another network (TakeUnacknowledged).
  entry.went_down = true;
  route_went_down_.store(true, std::memory_order_release);
  entry.next_attempt = now + Backoff(entry.attempts);
  ++entry.attempts;
  if (entry.next_attempt <= now) OpenViLocked(entry);
}

void ViaSubsystem::SetUpLocked(ViEntry& entry) {
  if (!entry.down) return;
  entry.down = false;
  down_count_.fetch_sub(1, std::memory_order_relaxed);
}

void ViaSubsystem::IdleLocked(ViEntry& entry) {
  SetUpLocked(entry);
  entry.went_down = false;
  entry.next_attempt = {};
}

void ViaSubsystem::BreakLocked(ViEntry& entry, const Status& why, bool warn) {
  if (!entry.broken.ok()) return;
  entry.broken = why.ok() ? Unavailable("the VI closed") : why;
  tcp::SendWindow& window = entry.streams.window();
  const size_t failed = window.size();
  window.Fail();
  SetUpLocked(entry);
  entry.went_down = false;
  DropViLocked(entry, entry.broken.message());
  if (warn) {
    Log().warn("tocl via: the way to {} is broken: {} ({} frames failed)", Describe(entry),
               entry.broken.message(), failed);
  } else {
    Log().debug("tocl via: the way to {} is broken: {} ({} frames failed)", Describe(entry),
                entry.broken.message(), failed);
  }
}

void ViaSubsystem::RefuseLocked(ViEntry& entry, Vi& vi, const std::string& why) {
  Log().warn("tocl via: closing the VI of {}: {}", vi.peer.ToString(), why);
  vi.refused = true;
  // Its next VI for this stream is refused, so that it breaks too.
  if (vi.peer_stream != 0) entry.refused_stream = vi.peer_stream;
  BreakLocked(entry,
              InvalidArgument(fmt::format("{} broke the protocol: {}", vi.peer.ToString(), why)),
              /*warn=*/false);
  // Broken already (by an earlier stream of the peer's), or not its VI.
  if (entry.vi == &vi) entry.vi = nullptr;
  vi.detached = true;
  if (vi.state != Vi::State::kClosed) vi.provider->Disconnect(why);
}

void ViaSubsystem::DropViLocked(ViEntry& entry, std::string_view why) {
  Vi* vi = std::exchange(entry.vi, nullptr);
  if (vi == nullptr) return;
  vi->detached = true;
  if (vi->state != Vi::State::kClosed) vi->provider->Disconnect(why);
}

std::vector<detail::BufferSlot*> ViaSubsystem::TakeLocked(ViEntry& entry) {
  std::vector<detail::BufferSlot*> slots;
  if (!entry.down || !entry.broken.ok()) return slots;
  // A request on its way announced the window's base: the peer would
  // count from there.
  DropViLocked(entry, "its frames went another way");
  for (const tcp::SendWindow::Entry& frame : entry.streams.window().Take()) {
    slots.push_back(frame.slot);
  }
  // Nothing to send now: idle, as after a loss with an empty window
  // (LoseLocked); the next Post connects at once.
  IdleLocked(entry);
  return slots;
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
  if (entry.refused_stream != 0 && data.stream == entry.refused_stream) {
    provider_->ConnectReject(request, entry.broken.message());
    return;
  }
  Vi* old = entry.vi;
  // A crossing: our VI is newer than the last the peer knows (our request,
  // or ours connected before this request was read: the peer accepted it
  // and sends on it), and ours wins. Accepting would detach ours here while
  // the peer keeps using its end. A request that names our VI as the one it
  // replaces says the peer has lost it: accepted.
  if (old != nullptr && old->initiated && old->state != Vi::State::kClosed &&
      old->epoch > data.epoch && options_.self_process < data.process) {
    provider_->ConnectReject(request, kCrossed);  // ours wins: the peer uses it
    return;
  }
  ConnectData reply{.process = options_.self_process,
                    .peer = data.process,
                    .class_index = data.class_index,
                    .epoch = std::max(data.epoch, entry.epoch) + 1};
  entry.streams.Describe(reply);
  const uint64_t peer_stream = entry.streams.peer_stream();
  const Result<StreamPair::Resume> resume = entry.streams.Agree(reply, data);
  if (!resume.ok()) {
    Log().warn("tocl via: connection request from {} ({}) refused: {}", request.peer_address(),
               data.process.ToString(), resume.status().message());
    provider_->ConnectReject(request, resume.status().message());
    return;
  }
  std::unique_ptr<Vi> vi = NewViLocked(entry, shared, /*initiated=*/false, &request);
  if (!vi || vi->posted == 0) {
    provider_->ConnectReject(request, kBusy);
    return;
  }
  reply.posted = vi->posted;
  NumberLocked(entry, *vi, *resume);
  if (peer_stream != 0 && entry.streams.peer_stream() != peer_stream) {
    DropStreamLocked(entry, *vi, peer_stream);
  }
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
  raw->epoch = reply.epoch;
  vis_opened_.fetch_add(1, std::memory_order_relaxed);
  if (old != nullptr) {
    // Our own request that lost the crossing (the peer rejects it), a VI
    // the peer is closing (its close request is on the way), or one it has
    // lost: it still delivers what it carries, and the numbers drop what
    // comes twice.
    old->detached = true;
  }
  entry.vi = raw;
  ResumeLocked(entry, *raw, *resume);
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
  if (flush_blocked_.load(std::memory_order_relaxed)) FlushBlocked();
  // Owed acknowledgements and VIs to make again are looked at every 64th
  // Poll: a clock read each round would cost more than a shm round.
  if ((acks_owed_.load(std::memory_order_relaxed) > 0 ||
       down_count_.load(std::memory_order_relaxed) > 0) &&
      (++poll_rounds_ & 63) == 0) {
    const auto now = Clock::now();
    if (acks_owed_.load(std::memory_order_relaxed) > 0) SendAcks(now);
    if (down_count_.load(std::memory_order_relaxed) > 0) Tick(now);
  }
  if (route_went_down_.load(std::memory_order_acquire)) ReportRoutesDown();
  return std::exchange(delivered_, 0);
}

bool ViaSubsystem::PrepareToSleep() {
  if (RepostOwed()) return false;
  if (!draining_.empty()) DisconnectDrained();
  // A sender's window waits for them: a sleeping process runs no timer.
  if (acks_owed_.load(std::memory_order_relaxed) > 0) SendAcks(Clock::time_point::max());
  return provider_->PrepareToSleep() && delivered_ == 0;
}

void ViaSubsystem::SendAcks(Clock::time_point now) {
  {
    std::lock_guard lock(owing_mu_);
    owing_seen_.assign(owing_.begin(), owing_.end());
  }
  // The VIs stay: only this (the polling) thread frees them (FreeClosed).
  for (Vi* vi : owing_seen_) {
    std::lock_guard lock(vi->entry->mu);
    if (!vi->ack_owed) continue;
    if (now != Clock::time_point::max()) {
      // The timer starts when the poller first sees it owed, so that the
      // receive path reads no clock.
      if (vi->ack_owed_since == Clock::time_point{}) {
        vi->ack_owed_since = now;
        continue;
      }
      if (now - vi->ack_owed_since < kAckDelay) continue;
    }
    SendAckLocked(*vi);
  }
}

Clock::time_point ViaSubsystem::Tick(Clock::time_point now) {
  auto next = Clock::time_point::max();
  for (auto& shared : SnapshotEntries()) {
    ViEntry& entry = *shared;
    std::lock_guard lock(entry.mu);
    if (!entry.broken.ok() || entry.streams.window().empty()) continue;
    const bool connected = entry.vi != nullptr && entry.vi->state == Vi::State::kConnected;
    if (connected) continue;
    if (entry.down) {
      if (now - entry.down_since >= options_.unreachable_timeout) {
        BreakLocked(entry,
                    Unavailable(fmt::format("no VI to {} for {} ms (unreachable_timeout)",
                                            Describe(entry), options_.unreachable_timeout.count())),
                    /*warn=*/true);
        continue;
      }
      next = std::min(next, entry.down_since + options_.unreachable_timeout);
    }
    if (entry.vi == nullptr) {
      if (now >= entry.next_attempt) OpenIfDueLocked(entry);
      if (entry.vi == nullptr) next = std::min(next, entry.next_attempt);
    }
  }
  return next;
}

Clock::time_point ViaSubsystem::WakeBy() {
  if (down_count_.load(std::memory_order_relaxed) == 0) return Clock::time_point::max();
  return Tick(Clock::now());
}

void ViaSubsystem::ReportRoutesDown() {
  route_went_down_.store(false, std::memory_order_relaxed);
  std::vector<Gid> down;
  for (auto& entry : SnapshotEntries()) {
    std::lock_guard lock(entry->mu);
    if (!std::exchange(entry->went_down, false)) continue;
    if (std::find(down.begin(), down.end(), entry->peer) == down.end()) {
      down.push_back(entry->peer);
    }
  }
  // Outside the entries' locks: the runtime takes its queue's lock and
  // calls the route.
  for (Gid peer : down) sink_.OnRouteDown(peer);
}

void ViaSubsystem::FlushBlocked() {
  flush_blocked_.store(false, std::memory_order_relaxed);
  for (auto& entry : SnapshotEntries()) {
    std::lock_guard lock(entry->mu);
    FlushLocked(*entry);
  }
}

void ViaSubsystem::Housekeeping() {
  CloseOverCap();
  // Entries waiting after a crossing lost or a busy peer, and down ones.
  Tick(Clock::now());
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
    const tcp::SendWindow& window = vi->entry->streams.window();
    stats.queued =
        vi->entry->vi == vi.get() ? static_cast<uint32_t>(window.size() - window.unwritten()) : 0;
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
  for (auto& entry : SnapshotEntries()) {
    std::lock_guard lock(entry->mu);
    BreakLocked(*entry, Unavailable("the via subsystem is closed"), /*warn=*/false);
  }
  FreeClosed();
}

}  // namespace tocl::subsystem::via
