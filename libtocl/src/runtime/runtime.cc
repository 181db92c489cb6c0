#include "tocl/runtime.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "runtime/runtime_impl.h"
#include "runtime/runtime_options.h"
#if TOCL_WITH_SHM
#include "subsystem/shm/shm_subsystem.h"
#endif
#if TOCL_WITH_TCP
#include "subsystem/tcp/tcp_subsystem.h"
#endif

namespace tocl {

using runtime::DestThread;
using runtime::Mailbox;
using runtime::Selector;
using runtime::SendPeer;
using Clock = std::chrono::steady_clock;

namespace {

std::atomic<uint64_t> next_instance{1};

// The last destination a thread sent to, so that a send loop skips the maps.
struct SendCache {
  uint64_t instance = 0;
  uint64_t to = 0;
  DestThread* dest = nullptr;
};
thread_local SendCache send_cache;

std::string ProgramName() {
  std::ifstream in("/proc/self/comm");
  std::string name;
  std::getline(in, name);
  return name.empty() ? "tocl" : name;
}

// How long a receiver waits for the poll token (or a message) before it
// counts as idle.
constexpr auto kEagerWait = std::chrono::milliseconds(100);

Clock::time_point DeadlineAfter(std::chrono::nanoseconds timeout) {
  auto now = Clock::now();
  if (timeout >= Clock::time_point::max() - now) return Clock::time_point::max();
  return now + timeout;
}

}  // namespace

// --- Impl: setup and teardown -------------------------------------------------

Runtime::Impl::Impl(RuntimeOptions opts)
    : options(std::move(opts)), budget(options.pool_cap), instance(next_instance.fetch_add(1)) {}

Runtime::Impl::~Impl() {
  (void)Shutdown(std::chrono::milliseconds(0));
  // Held buffers go back to their pools before the subsystems (and their
  // pools) go: peers first (queued sends), then mailboxes.
  peers.clear();
  for (auto& [source, state] : order) {
    for (auto& [seq, slot] : state.held) slot->pool->Unref(slot);
  }
  order.clear();
  threads.ForEach([](Mailbox& mailbox) { mailbox.Leave(); });
}

Status Runtime::Impl::Open() {
  TOCL_ASSIGN_OR_RETURN(runtime::ResolvedOptions resolved, runtime::ResolveOptions(options));
  num_classes = resolved.num_classes;
  TOCL_ASSIGN_OR_RETURN(reactor, runtime::EpollReactor::Create());

  EnrollOptions enroll;
  enroll.name = options.name.empty() ? ProgramName() : options.name;
  enroll.attributes = options.attributes;
  runtime::DirectoryEvents events;
  events.on_exited = [this](Gid gid, const std::string& reason) { OnExited(gid, reason); };
  events.pool_stats = [this] { return PoolStats(); };
  TOCL_ASSIGN_OR_RETURN(
      link, runtime::DirectoryLink::Start(resolved.daemon_address, enroll, options.stats_interval,
                                          std::move(events)));
  process = link->process();

  progress = std::make_unique<runtime::ProgressEngine>(*reactor, [this] { return FlushQueued(); });
#if TOCL_WITH_SHM
  if (resolved.shm) {
    subsystem::shm::ShmOptions shm_options;
    shm_options.self_process = process;
    shm_options.num_classes = num_classes;
    TOCL_ASSIGN_OR_RETURN(shm, subsystem::shm::OpenShm(shm_options, *reactor, *this, budget));
    progress->AddSubsystem(shm.get());
    reactor->SetWakeHook([subsystem = shm.get()] { subsystem->WakeSleeper(); });
  }
#else
  if (resolved.shm) return InvalidArgument("this libtocl was built without the shm subsystem");
#endif
#if TOCL_WITH_TCP
  if (resolved.tcp) {
    subsystem::tcp::TcpOptions tcp_options;
    tcp_options.self_process = process;
    tcp_options.bind_address = resolved.tcp_bind;
    tcp_options.num_classes = num_classes;
    TOCL_ASSIGN_OR_RETURN(tcp,
                          subsystem::tcp::TcpSubsystem::Open(tcp_options, *reactor, *this, budget));
    progress->AddSubsystem(tcp.get());
  }
#else
  if (resolved.tcp) return InvalidArgument("this libtocl was built without the tcp subsystem");
#endif
  for (auto* subsystem : Subsystems()) {
    TOCL_RETURN_IF_ERROR(
        link->PublishEndpoint(subsystem->name(), subsystem->address())
            .WithContext(fmt::format("publish the {} endpoint", subsystem->name())));
  }
  progress->Start();
  return Status::Ok();
}

Status Runtime::Impl::Shutdown(std::chrono::milliseconds flush_timeout) {
  std::lock_guard lock(shutdown_mu);
  if (shut_down.load()) return Status::Ok();
  shutting_down.store(true);
  Status result;
  // Flush: wait (polling when we can) until every queue and route is empty.
  const auto deadline = Clock::now() + flush_timeout;
  for (;;) {
    bool pending = false;
    {
      std::shared_lock dest_lock(dest_mu);
      for (auto& [raw, peer] : peers) {
        std::lock_guard peer_lock(peer->mu);
        if (!peer->queue.empty()) pending = true;
        for (auto& route : peer->routes) {
          if (route && !route->Broken() && !route->Drained()) pending = true;
        }
      }
    }
    if (!pending) break;
    if (Clock::now() >= deadline) {
      result = DeadlineExceeded("messages were still being sent when the runtime shut down");
      break;
    }
    if (progress && progress->TryAcquire()) {
      progress->PollOnce();
      progress->Release();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  if (progress) progress->Stop();
  // Wake receivers: they return Cancelled.
  threads.ForEach([](Mailbox& mailbox) { mailbox.Wake(); });
  if (progress) {
    // Receivers leave the token within their poll round; subsystems close
    // with nobody polling.
    const auto until = Clock::now() + std::chrono::seconds(2);
    while (!progress->TryAcquire() && Clock::now() < until) std::this_thread::yield();
  }
  {
    std::unique_lock dest_lock(dest_mu);
    for (auto& [raw, peer] : peers) {
      std::lock_guard peer_lock(peer->mu);
      FailPeerLocked(*peer, Unavailable("the runtime shut down"));
      for (auto& route : peer->routes) route.reset();
      peer->default_route = nullptr;
    }
  }
  if (tcp) tcp->Close();
  if (shm) shm->Close();
  if (link) {
    (void)link->Flush(std::chrono::seconds(1));
    Status closed = link->Close();
    if (result.ok() && !closed.ok()) result = closed;
  }
  shut_down.store(true);
  return result;
}

// --- receive side -------------------------------------------------------------

Status Runtime::Impl::OnMessage(Gid from_process, detail::BufferSlot* slot) {
  if (last_order == nullptr || last_source != from_process.raw()) {
    last_order = &order[from_process.raw()];
    last_source = from_process.raw();
  }
  SourceOrder& source = *last_order;
  const uint64_t seq = slot->header().seq;
  if (seq != source.next_seq) {
    const size_t bytes = Mailbox::SlotBytes(slot);
    if (seq < source.next_seq || source.held.count(seq) != 0) {
      slot->pool->Unref(slot);
      return InvalidArgument(fmt::format("a duplicate message (sequence number {}, expected {})",
                                         seq, source.next_seq));
    }
    // A correct sender's frames are missing only while they travel another
    // network; a gap that holds this much memory is a broken sender.
    if (source.held_bytes + bytes > options.unexpected_cap / 2) {
      slot->pool->Unref(slot);
      for (auto& [held_seq, held] : source.held) held->pool->Unref(held);
      unexpected_bytes.fetch_sub(source.held_bytes, std::memory_order_relaxed);
      const uint64_t expected = source.next_seq;
      order.erase(from_process.raw());
      last_order = nullptr;
      return InvalidArgument(fmt::format(
          "sequence number {} arrived while {} never did; the frames held waiting exceed {} bytes",
          seq, expected, options.unexpected_cap / 2));
    }
    source.held.emplace(seq, slot);
    source.held_bytes += bytes;
    unexpected_bytes.fetch_add(bytes, std::memory_order_relaxed);
    return Status::Ok();
  }
  for (;;) {
    ++source.next_seq;
    if (Status status = DeliverLocal(slot); !status.ok()) {
      // The sender was told the message left; the thread it was for is gone.
      spdlog::debug("tocl: dropping a message from {}: {}", from_process.ToString(),
                    status.ToString());
      slot->pool->Unref(slot);
    }
    auto next = source.held.find(source.next_seq);
    if (next == source.held.end()) break;
    slot = next->second;
    source.held.erase(next);
    const size_t bytes = Mailbox::SlotBytes(slot);
    source.held_bytes -= bytes;
    unexpected_bytes.fetch_sub(bytes, std::memory_order_relaxed);
  }
  return Status::Ok();
}

Status Runtime::Impl::DeliverLocal(detail::BufferSlot* slot) {
  const Gid to = Gid::FromRaw(slot->header().destination);
  Mailbox* mailbox = threads.Find(to.thread_index());
  if (mailbox == nullptr) return NotFound(fmt::format("no thread {}", to.ToString()));
  const size_t bytes = Mailbox::SlotBytes(slot);
  slot->set_state(BufferState::kIdle);
  unexpected_bytes.fetch_add(bytes, std::memory_order_relaxed);
  if (!mailbox->Deliver(slot)) {
    unexpected_bytes.fetch_sub(bytes, std::memory_order_relaxed);
    return FailedPrecondition(fmt::format("thread {} has left", to.ToString()));
  }
  return Status::Ok();
}

Result<Mailbox*> Runtime::Impl::LocalMailbox(Gid self) const {
  if (!self.is_thread() || self.process() != process) {
    return InvalidArgument(fmt::format("{} is not a thread of this process ({})", self.ToString(),
                                       process.ToString()));
  }
  Mailbox* mailbox = threads.Find(self.thread_index());
  if (mailbox == nullptr) {
    return InvalidArgument(fmt::format("thread {} was never enrolled", self.ToString()));
  }
  if (mailbox->left())
    return FailedPrecondition(fmt::format("thread {} has left", self.ToString()));
  return mailbox;
}

void Runtime::Impl::PollFor(Mailbox& mailbox, Clock::time_point deadline) {
  const uint32_t seen = mailbox.signal();
  const auto spin_until = Clock::now() + options.spin;
  for (uint32_t round = 1;; ++round) {
    progress->PollOnce();
    if (mailbox.signal() != seen || shutting_down.load(std::memory_order_relaxed)) return;
    // Reading the clock costs more than a round of polling shm: look at it
    // every 32nd round only.
    if (round % 32 != 0 && options.spin.count() != 0) continue;
    const auto now = Clock::now();
    if (now >= deadline) return;
    if (now >= spin_until) {
      progress->Sleep(deadline);
      progress->PollOnce();
      return;
    }
  }
}

template <typename TryMatch>
Status Runtime::Impl::WaitFor(Gid self, Clock::time_point deadline, bool blocking,
                              TryMatch&& try_match) {
  TOCL_ASSIGN_OR_RETURN(Mailbox * mailbox, LocalMailbox(self));
  // Eager: polls for itself, spinning first, for kEagerWait; idle after
  // that (see below).
  const auto eager_until = Clock::now() + kEagerWait;
  bool eager = true;
  for (;;) {
    if (try_match(*mailbox)) return Status::Ok();
    if (eager && Clock::now() >= eager_until) eager = false;
    if (mailbox->left())
      return FailedPrecondition(fmt::format("thread {} has left", self.ToString()));
    if (shutting_down.load(std::memory_order_relaxed)) {
      return Status(StatusCode::kCancelled, "the runtime is shutting down");
    }
    if (!blocking) {
      if (progress->TryAcquire()) {
        progress->PollOnce();
        progress->Release();
        if (try_match(*mailbox)) return Status::Ok();
      }
      return Status(StatusCode::kTryAgain, "no matching message");
    }
    if (deadline != Clock::time_point::max() && Clock::now() >= deadline) {
      return DeadlineExceeded(
          fmt::format("no matching message for {} arrived in time", self.ToString()));
    }
    if (!eager) {
      // An idle receiver (it waited a while and nothing came) does not
      // take the poll token to spin and sleep with it: with many threads
      // blocked in Recv that would pass the token around and keep the
      // busy ones from polling for themselves. It looks once, then sleeps
      // on its mailbox; the poller of the moment (a busy receiver, else the
      // progress thread) hands it its messages.
      if (progress->TryAcquire()) {
        progress->PollOnce();
        progress->Release();
        if (try_match(*mailbox)) return Status::Ok();
      }
      mailbox->Wait(mailbox->signal(), std::min(deadline, Clock::now() + std::chrono::seconds(1)));
      continue;
    }
    if (progress->TryAcquire()) {
      PollFor(*mailbox, deadline);
      progress->Release();
      continue;
    }
    // Someone else polls: sleep on our mailbox; the poller hands us our
    // messages, or the token when it leaves.
    const uint32_t seen = mailbox->signal();
    progress->AddTokenWaiter(mailbox);
    if (progress->TryAcquire()) {
      progress->RemoveTokenWaiter(mailbox);
      PollFor(*mailbox, deadline);
      progress->Release();
      continue;
    }
    mailbox->Wait(seen, std::min(deadline, eager_until));
    progress->RemoveTokenWaiter(mailbox);
  }
}

Result<Buffer> Runtime::Impl::Receive(Gid self, Selector selector, Clock::time_point deadline,
                                      bool blocking) {
  detail::BufferSlot* slot = nullptr;
  TOCL_RETURN_IF_ERROR(WaitFor(self, deadline, blocking, [&](Mailbox& mailbox) {
    slot = mailbox.Take(selector);
    return slot != nullptr;
  }));
  const size_t bytes = Mailbox::SlotBytes(slot);
  const size_t before = unexpected_bytes.fetch_sub(bytes, std::memory_order_relaxed);
  if (before > options.unexpected_cap && before - bytes <= options.unexpected_cap) {
    // No longer congested: a sleeping poller must provide buffers and read
    // the paused connections again.
    reactor->Wake();
  }
  return Buffer(slot);
}

Result<MessageInfo> Runtime::Impl::ProbeFor(Gid self, Selector selector, Clock::time_point deadline,
                                            bool blocking) {
  MessageInfo info;
  TOCL_RETURN_IF_ERROR(WaitFor(self, deadline, blocking,
                               [&](Mailbox& mailbox) { return mailbox.Peek(selector, info); }));
  return info;
}

// --- send side ----------------------------------------------------------------

std::vector<subsystem::Subsystem*> Runtime::Impl::Subsystems() const {
  std::vector<subsystem::Subsystem*> open;
  for (auto* subsystem : {shm.get(), tcp.get()}) {
    if (subsystem != nullptr) open.push_back(subsystem);
  }
  return open;
}

std::vector<PoolClassStats> Runtime::Impl::PoolStats() const {
  std::vector<PoolClassStats> stats;
  for (auto* subsystem : Subsystems()) {
    auto more = subsystem->pool().Stats();
    stats.insert(stats.end(), more.begin(), more.end());
  }
  return stats;
}

subsystem::Subsystem* Runtime::Impl::SubsystemFor(Network network) const {
  switch (network) {
    case Network::kFastest:
      return shm ? shm.get() : tcp.get();
    case Network::kShm:
      return shm.get();
    case Network::kTcp:
      return tcp.get();
  }
  return nullptr;
}

Status Runtime::Impl::CheckSender(Gid from) const {
  if (!from.is_thread() || from.process() != process) {
    return InvalidArgument(fmt::format("the sender {} is not a thread of this process ({})",
                                       from.ToString(), process.ToString()));
  }
  Mailbox* mailbox = threads.Find(from.thread_index());
  if (mailbox == nullptr) {
    return InvalidArgument(fmt::format("the sender {} was never enrolled", from.ToString()));
  }
  if (mailbox->left())
    return FailedPrecondition(fmt::format("the sender {} has left", from.ToString()));
  return Status::Ok();
}

Status Runtime::Impl::ResolvePeerLocked(SendPeer& peer) {
  if (peer.state == SendPeer::State::kReady) return Status::Ok();
  if (peer.state == SendPeer::State::kFailed) return peer.failure;
  auto entity = link->client().Lookup(peer.process);
  if (!entity.ok()) {
    if (entity.status().code() == StatusCode::kNotFound) {
      FailPeerLocked(peer, NotFound(fmt::format("no process {}", peer.process.ToString())));
      return peer.failure;
    }
    return entity.status().WithContext(fmt::format("look up {}", peer.process.ToString()));
  }
  if (entity->state == EntityState::kExited) {
    FailPeerLocked(
        peer, FailedPrecondition(fmt::format("process {} has exited ({})", peer.process.ToString(),
                                             entity->exit_reason)));
    return peer.failure;
  }
  // One route per network that reaches it; the default is the fastest.
  for (Network network : {Network::kShm, Network::kTcp}) {
    subsystem::Subsystem* subsystem = SubsystemFor(network);
    if (subsystem == nullptr) continue;
    for (const Endpoint& endpoint : entity->endpoints) {
      if (endpoint.subsystem != subsystem->name() ||
          !subsystem->Reaches(peer.process, endpoint.address)) {
        continue;
      }
      auto route = subsystem->Connect(peer.process, endpoint.address);
      if (!route.ok()) {
        spdlog::warn("tocl: cannot open a {} route to {}: {}", subsystem->name(),
                     peer.process.ToString(), route.status().ToString());
        continue;
      }
      peer.routes[static_cast<int>(network)] = std::move(*route);
      if (peer.default_route == nullptr)
        peer.default_route = peer.routes[static_cast<int>(network)].get();
      break;
    }
  }
  if (peer.default_route == nullptr) {
    return Unavailable(fmt::format("no network of this process reaches {} (its endpoints: {})",
                                   peer.process.ToString(), entity->endpoints.size()));
  }
  peer.state = SendPeer::State::kReady;
  return Status::Ok();
}

Result<DestThread*> Runtime::Impl::ResolveDestination(Gid to) {
  if (send_cache.instance == instance && send_cache.to == to.raw()) return send_cache.dest;
  DestThread* dest = nullptr;
  {
    std::shared_lock lock(dest_mu);
    auto it = dests.find(to.raw());
    if (it != dests.end()) dest = it->second.get();
  }
  if (dest == nullptr) {
    if (shutting_down.load()) return Unavailable("the runtime is shutting down");
    // First send to this thread: the directory says whether it runs. A
    // thread is registered in the background a few milliseconds after it
    // enrolled, so one the directory does not know yet is waited for (up to
    // connect_timeout) while its process runs.
    TOCL_RETURN_IF_ERROR(AwaitRegistration(to));
    std::unique_lock lock(dest_mu);
    auto& peer = peers[to.process().raw()];
    if (!peer) peer = std::make_unique<SendPeer>(to.process());
    auto& slot = dests[to.raw()];
    if (!slot) {
      slot = std::make_unique<DestThread>();
      slot->peer = peer.get();
    }
    dest = slot.get();
  }
  send_cache = SendCache{instance, to.raw(), dest};
  return dest;
}

Status Runtime::Impl::AwaitRegistration(Gid to) {
  const auto deadline = Clock::now() + options.connect_timeout;
  auto delay = std::chrono::milliseconds(1);
  for (;;) {
    auto thread = link->client().Lookup(to);
    if (thread.ok()) {
      if (thread->state == EntityState::kExited) {
        return FailedPrecondition(fmt::format("thread {} has exited", to.ToString()));
      }
      return Status::Ok();
    }
    if (thread.status().code() != StatusCode::kNotFound) {
      return thread.status().WithContext(fmt::format("look up {}", to.ToString()));
    }
    auto owner = link->client().Lookup(to.process());
    if (!owner.ok()) {
      if (owner.status().code() == StatusCode::kNotFound) {
        return NotFound(fmt::format("no process {}", to.process().ToString()));
      }
      return owner.status().WithContext(fmt::format("look up {}", to.process().ToString()));
    }
    if (owner->state == EntityState::kExited) {
      return FailedPrecondition(
          fmt::format("process {} has exited ({})", to.process().ToString(), owner->exit_reason));
    }
    if (Clock::now() + delay > deadline) {
      return NotFound(
          fmt::format("no thread {}: its process runs but has not registered it", to.ToString()));
    }
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::milliseconds(100));
  }
}

void Runtime::Impl::FailPeerLocked(SendPeer& peer, Status why) {
  if (peer.state != SendPeer::State::kFailed) {
    peer.state = SendPeer::State::kFailed;
    peer.failure = std::move(why);
  }
  for (auto& pending : peer.queue) {
    pending.slot->set_state(BufferState::kFailed);
    pending.slot->pool->Unref(pending.slot);
  }
  if (!peer.queue.empty()) {
    spdlog::warn("tocl: {} queued messages to {} failed: {}", peer.queue.size(),
                 peer.process.ToString(), peer.failure.ToString());
  }
  peer.queue.clear();
  peer.space.notify_all();
}

bool Runtime::Impl::FlushPeerLocked(SendPeer& peer) {
  while (!peer.queue.empty()) {
    auto& head = peer.queue.front();
    Status status = head.route->Post(head.slot);
    if (status.code() == StatusCode::kTryAgain) return true;
    if (!status.ok()) {
      head.slot->set_state(BufferState::kFailed);
      head.slot->pool->Unref(head.slot);
      peer.queue.pop_front();
      FailPeerLocked(peer, status);
      return false;
    }
    peer.queue.pop_front();
    if (peer.queue.size() + 1 == options.send_queue_depth) peer.space.notify_all();
  }
  peer.space.notify_all();
  return false;
}

bool Runtime::Impl::FlushQueued() {
  // Swapping with the poller's own vector keeps both capacities: no
  // allocation per poll round while sends wait.
  {
    std::lock_guard lock(blocked_mu);
    flushing.swap(blocked);
  }
  std::erase_if(flushing, [&](SendPeer* peer) {
    std::lock_guard lock(peer->mu);
    if (FlushPeerLocked(*peer)) return false;  // still waiting
    peer->listed_blocked = false;
    return true;
  });
  if (flushing.empty()) return false;
  std::lock_guard lock(blocked_mu);
  blocked.insert(blocked.end(), flushing.begin(), flushing.end());
  flushing.clear();
  return true;
}

Status Runtime::Impl::CheckSend(Gid from, Gid to, Tag tag) const {
  TOCL_RETURN_IF_ERROR(CheckSender(from));
  if (tag == kAnyTag) return InvalidArgument("kAnyTag matches any tag in Recv; it cannot be sent");
  if (!to.is_thread()) return InvalidArgument(fmt::format("{} is not a thread id", to.ToString()));
  if (shutting_down.load(std::memory_order_relaxed)) {
    return Unavailable("the runtime is shutting down");
  }
  return Status::Ok();
}

Result<SendPeer*> Runtime::Impl::PeerOf(Gid to) {
  TOCL_ASSIGN_OR_RETURN(DestThread * dest, ResolveDestination(to));
  if (dest->exited.load(std::memory_order_acquire)) {
    return FailedPrecondition(fmt::format("thread {} has exited", to.ToString()));
  }
  return dest->peer;
}

Status Runtime::Impl::SendSlot(Gid from, Gid to, Tag tag, detail::BufferSlot* slot,
                               Network network) {
  TOCL_RETURN_IF_ERROR(CheckSend(from, to, tag));
  return PostSlot(from, to, tag, slot, network);
}

Status Runtime::Impl::PostSlot(Gid from, Gid to, Tag tag, detail::BufferSlot* slot,
                               Network network) {
  wire::Header& header = slot->header();
  header.magic = wire::kMagic;
  header.version = wire::kVersion;
  header.kind = wire::FrameKind::kMessage;
  header.flags = 0;
  header.tag = tag;
  header.source = from.raw();
  header.destination = to.raw();
  header.offset = 0;
  header.total = header.length;
  header.reserved = 0;

  if (to.process() == process) return DeliverLocal(slot);

  TOCL_ASSIGN_OR_RETURN(SendPeer * destination, PeerOf(to));
  SendPeer& peer = *destination;
  std::unique_lock lock(peer.mu);
  TOCL_RETURN_IF_ERROR(ResolvePeerLocked(peer));
  subsystem::Route* route = peer.default_route;
  if (network != Network::kFastest && peer.routes[static_cast<int>(network)]) {
    route = peer.routes[static_cast<int>(network)].get();
  }
  header.seq = peer.next_seq++;
  // Earlier frames first (FIFO): the receiver may have provided buffers
  // since, and nobody else may be polling for us.
  if (!peer.queue.empty()) FlushPeerLocked(peer);
  if (peer.state != SendPeer::State::kReady) {
    --peer.next_seq;
    return peer.failure;
  }
  if (peer.queue.empty()) {
    slot->set_state(BufferState::kInFlight);
    Status status = route->Post(slot);
    if (status.ok()) return Status::Ok();
    if (status.code() != StatusCode::kTryAgain) {
      --peer.next_seq;  // never sent: the receiver must not wait for it
      slot->set_state(BufferState::kFailed);
      FailPeerLocked(peer, status);
      return status;
    }
  }
  slot->set_state(BufferState::kQueued);
  peer.queue.push_back({slot, route});
  if (!peer.listed_blocked) {
    peer.listed_blocked = true;
    std::lock_guard blocked_lock(blocked_mu);
    blocked.push_back(&peer);
  }
  progress->NoteQueued();
  // Back-pressure: wait for room, polling when we can (the receiver's
  // "more buffers" bell may be ours to hear); sleep only after a while.
  for (int round = 0;
       peer.queue.size() >= options.send_queue_depth && peer.state == SendPeer::State::kReady;
       ++round) {
    if (!FlushPeerLocked(peer)) break;
    lock.unlock();
    if (progress->TryAcquire()) {
      progress->PollOnce();
      progress->Release();
    }
    if (round < 256) std::this_thread::yield();
    lock.lock();
    if (round >= 256) peer.space.wait_for(lock, std::chrono::milliseconds(1));
  }
  return Status::Ok();
}

Status Runtime::Impl::SendCopy(Gid from, Gid to, Tag tag, std::span<const std::byte> payload) {
  const uint32_t class_index = buffers::ClassFor(payload.size());
  if (class_index >= num_classes) {
    return InvalidArgument(fmt::format(
        "a {} byte message is larger than the short maximum of {} bytes (header included)",
        payload.size(), buffers::ClassBytes(num_classes - 1)));
  }
  TOCL_RETURN_IF_ERROR(CheckSend(from, to, tag));
  // The shm fast path: straight into the buffer the receiver provided.
  if (shm && to.process() != process) {
    TOCL_ASSIGN_OR_RETURN(SendPeer * destination, PeerOf(to));
    SendPeer& peer = *destination;
    std::lock_guard lock(peer.mu);
    TOCL_RETURN_IF_ERROR(ResolvePeerLocked(peer));
    if (!peer.queue.empty()) FlushPeerLocked(peer);
    if (peer.state == SendPeer::State::kReady && peer.queue.empty()) {
      wire::Header header;
      header.tag = tag;
      header.length = static_cast<uint32_t>(payload.size());
      header.total = header.length;
      header.source = from.raw();
      header.destination = to.raw();
      header.seq = peer.next_seq;
      if (peer.default_route->PostCopy(header, payload).ok()) {
        ++peer.next_seq;
        return Status::Ok();
      }
    }
  }
  subsystem::Subsystem* subsystem = SubsystemFor(Network::kFastest);
  TOCL_ASSIGN_OR_RETURN(detail::BufferSlot * slot,
                        subsystem->pool().Get(class_index, AtCap::kWait, Clock::time_point::max()));
  std::memcpy(slot->payload(), payload.data(), payload.size());
  slot->header().length = static_cast<uint32_t>(payload.size());
  Status status = PostSlot(from, to, tag, slot, Network::kFastest);
  if (!status.ok()) slot->pool->Unref(slot);
  return status;
}

void Runtime::Impl::OnExited(Gid gid, const std::string& reason) {
  std::shared_lock lock(dest_mu);
  if (gid.is_thread()) {
    auto it = dests.find(gid.raw());
    if (it != dests.end()) it->second->exited.store(true, std::memory_order_release);
    return;
  }
  if (!gid.is_process()) return;
  for (auto& [raw, dest] : dests) {
    if (Gid::FromRaw(raw).process() == gid) dest->exited.store(true, std::memory_order_release);
  }
  auto it = peers.find(gid.raw());
  if (it == peers.end()) return;
  std::lock_guard peer_lock(it->second->mu);
  FailPeerLocked(*it->second, FailedPrecondition(fmt::format("process {} has exited ({})",
                                                             gid.ToString(), reason)));
}

// --- Runtime ------------------------------------------------------------------

Runtime::Runtime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Runtime::~Runtime() = default;

Result<std::unique_ptr<Runtime>> Runtime::Start(RuntimeOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  TOCL_RETURN_IF_ERROR(impl->Open());
  return std::unique_ptr<Runtime>(new Runtime(std::move(impl)));
}

Gid Runtime::gid() const {
  return impl_->process;
}
const RuntimeOptions& Runtime::options() const {
  return impl_->options;
}

Status Runtime::Shutdown(std::chrono::milliseconds flush_timeout) {
  return impl_->Shutdown(flush_timeout);
}

Result<Gid> Runtime::EnrollThread(std::string name, Attributes attributes) {
  if (impl_->shutting_down.load()) return Unavailable("the runtime is shutting down");
  TOCL_RETURN_IF_ERROR(ValidateName("thread name", name));
  for (const auto& [key, value] : attributes) TOCL_RETURN_IF_ERROR(ValidateAttribute(key, value));
  const uint32_t index = impl_->next_thread.fetch_add(1);
  if (index > Gid::kMaxThread) {
    return ResourceExhausted(
        fmt::format("this process has used all {} thread ids", Gid::kMaxThread));
  }
  const Gid gid = Gid::Thread(impl_->process, index);
  impl_->threads.Insert(index, std::make_unique<Mailbox>(gid));
  impl_->link->QueueRegister(ThreadInfo{gid, std::move(name), std::move(attributes)});
  return gid;
}

Status Runtime::LeaveThread(Gid thread) {
  TOCL_ASSIGN_OR_RETURN(Mailbox * mailbox, impl_->LocalMailbox(thread));
  mailbox->Leave();
  impl_->link->QueueUnregister(thread);
  return Status::Ok();
}

Result<Buffer> Runtime::GetBuffer(size_t size, Network network, AtCap at_cap,
                                  std::chrono::milliseconds timeout) {
  subsystem::Subsystem* subsystem = impl_->SubsystemFor(network);
  if (subsystem == nullptr) {
    return InvalidArgument(
        fmt::format("network {} is not enabled in this process", NetworkName(network)));
  }
  const uint32_t class_index = buffers::ClassFor(size);
  if (class_index >= impl_->num_classes) {
    return InvalidArgument(fmt::format(
        "a {} byte buffer is larger than the short maximum of {} bytes (header included)", size,
        buffers::ClassBytes(impl_->num_classes - 1)));
  }
  TOCL_ASSIGN_OR_RETURN(detail::BufferSlot * slot,
                        subsystem->pool().Get(class_index, at_cap, DeadlineAfter(timeout)));
  slot->header().length = static_cast<uint32_t>(size);
  return Buffer(slot);
}

std::vector<PoolClassStats> Runtime::PoolStats() const {
  return impl_->PoolStats();
}

size_t Runtime::short_max_payload() const {
  return buffers::ClassBytes(impl_->num_classes - 1) - wire::kHeaderBytes;
}

Status Runtime::Send(Gid from, Gid to, Tag tag, Buffer&& buffer) {
  if (!buffer.valid()) return InvalidArgument("an empty buffer cannot be sent");
  detail::BufferSlot* slot = buffer.slot();
  Status status = impl_->SendSlot(from, to, tag, slot, slot->pool->network());
  if (status.ok()) buffer.Detach();  // the runtime has its reference now
  return status;
}

Status Runtime::Send(Gid from, Gid to, Tag tag, Buffer& buffer) {
  if (!buffer.valid()) return InvalidArgument("an empty buffer cannot be sent");
  const BufferState state = buffer.state();
  if (state == BufferState::kQueued || state == BufferState::kInFlight) {
    return FailedPrecondition("the buffer is still being sent; wait until state() is kSent");
  }
  detail::BufferSlot* slot = buffer.slot();
  if (to.process() == impl_->process) {
    // The receiver gets its own copy: the caller keeps writing to this one.
    return Send(from, to, tag, buffer.span());
  }
  slot->refs.fetch_add(1, std::memory_order_relaxed);
  Status status = impl_->SendSlot(from, to, tag, slot, slot->pool->network());
  if (!status.ok()) slot->pool->Unref(slot);
  return status;
}

Status Runtime::Send(Gid from, Gid to, Tag tag, std::span<const std::byte> payload) {
  return impl_->SendCopy(from, to, tag, payload);
}

Result<Buffer> Runtime::Recv(Gid self, Gid source, Tag tag) {
  return impl_->Receive(self, Selector{source, tag}, Clock::time_point::max(), true);
}

Result<Buffer> Runtime::RecvFor(Gid self, std::chrono::nanoseconds timeout, Gid source, Tag tag) {
  return impl_->Receive(self, Selector{source, tag}, DeadlineAfter(timeout), true);
}

Result<Buffer> Runtime::TryRecv(Gid self, Gid source, Tag tag) {
  return impl_->Receive(self, Selector{source, tag}, Clock::now(), false);
}

Result<MessageInfo> Runtime::Probe(Gid self, std::chrono::nanoseconds timeout, Gid source,
                                   Tag tag) {
  return impl_->ProbeFor(self, Selector{source, tag}, DeadlineAfter(timeout), true);
}

Result<MessageInfo> Runtime::TryProbe(Gid self, Gid source, Tag tag) {
  return impl_->ProbeFor(self, Selector{source, tag}, Clock::now(), false);
}

}  // namespace tocl
