#include "tocl/runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "buffers/large_slot.h"
#include "core/deadline.h"
#include "core/logger.h"
#include "runtime/cluster_events.h"
#include "runtime/directory_queries.h"
#include "runtime/handler_dispatch.h"
#include "runtime/internal_threads.h"
#include "runtime/membership/membership_watches.h"
#include "runtime/multicast_service.h"
#include "runtime/notifier.h"
#include "runtime/runtime_impl.h"
#include "runtime/runtime_options.h"
#include "runtime/thread_service.h"
#include "security/handshake.h"

namespace tocl {

static_assert(kMaxMessageBytes == wire::kMaxMessageBytes);

using runtime::Mailbox;
using runtime::ReservedThread;
using runtime::Selector;
using Clock = std::chrono::steady_clock;

namespace {

// Set while this thread hands a gone process's frames to their receivers
// (DeliverArrivedFrom): the receive side's congestion does not hold them
// back (RailSink::Congested). A process that exited sends nothing more:
// what it left is bounded by its rings and sockets.
thread_local bool draining_gone = false;

// How long the frames of a process that exited may hold up its notice: its
// tcp connections end within a round trip; frames kept out by a pool at
// its cap may take longer, and then the notice goes first.
constexpr auto kDrainGoneFor = std::chrono::seconds(2);

}  // namespace

// --- Impl: setup and teardown -------------------------------------------------

Runtime::Impl::Impl(RuntimeOptions opts)
    : options(std::move(opts)),
      budget(options.pool_cap),
      receive(
          options.unexpected_cap, options.spin, shutting_down,
          runtime::ReceiveSide::Hooks{
              .wake_poller = [this] { reactor->Wake(); },
              .receive_posted = [this] { long_receiver.NoteReceivePosted(); },
              .unbind_posted =
                  [this](runtime::PostedReceive& post) { return long_receiver.UnbindPosted(post); },
          }),
      routes(
          runtime::PeerRoutes::Settings{.queue_depth = options.send_queue_depth,
                                        .connect_timeout = options.connect_timeout},
          [this](Gid gid) { return daemons->Lookup(gid); }, queue_events, shutting_down),
      send_side(receive, routes, rails, shutting_down,
                [this](Gid from, Gid to, Tag tag, std::span<const std::byte> payload) {
                  return SendLong(from, to, tag, payload);
                }),
      lanes(
          options.unexpected_cap / 2, receive.unexpected_bytes(),
          [this](Gid from_process, buffers::SlotRef slot) {
            return DeliverInOrder(from_process, std::move(slot));
          },
          [this](Gid from_process, buffers::SlotRef slot, bool given_up) {
            return long_receiver.OnRefill(from_process, std::move(slot), given_up);
          },
          options.partial_timeout),
      long_receiver(
          runtime::LongReceiver::Limits{
              .reassembly_cap = options.reassembly_cap,
              .partial_timeout = options.partial_timeout,
              .fragment_timeout = options.fragment_timeout,
          },
          receive, long_receiver_events),
      long_sender(
          runtime::LongSender::Limits{
              .fragment_timeout = options.fragment_timeout,
              .partial_timeout = options.partial_timeout,
          },
          receive, shutting_down, long_sender_events) {}

Runtime::Impl::~Impl() {
  (void)Shutdown(std::chrono::milliseconds(0));
  // Held buffers go back to their pools before the subsystems (and their
  // pools) go: the peers' queued sends (`routes`, a member after `rails`),
  // and held frames and mailboxes here.
  lanes.Clear();
  long_receiver.Clear();
  receive.LeaveAll();
}

Status Runtime::Impl::Open() {
  // `options` stays as the application gave it (Runtime::options());
  // `resolved` has what the environment fills in, for the networks.
  TOCL_ASSIGN_OR_RETURN(runtime::ResolvedOptions resolved, runtime::ResolveOptions(options));
  num_classes = resolved.num_classes;
  long_sender.SetFragmentBytes(ShortMaxPayload());
  TOCL_ASSIGN_OR_RETURN(reactor, runtime::EpollReactor::Create());

  // The library's logger is built on first use (its sink's console mutex
  // behind a static-init guard in spdlog's uninstrumented library): built
  // here, before the runtime's threads start, ThreadSanitizer sees it happen
  // before their first log line.
  (void)Log();
  TOCL_ASSIGN_OR_RETURN(parent, runtime::ParentFromEnvironment());
  notifier = std::make_unique<runtime::Notifier>(runtime::NotifierHooks{
      .lookup = [this](Gid gid) { return daemons->Lookup(gid); },
      .deliver =
          [this](Gid self, Gid source, Tag tag, std::span<const std::byte> payload) {
            return send_side.DeliverNotice(self, source, tag, payload);
          },
      .deliver_arrived = [this](Gid gone,
                                const std::string& reason) { DeliverArrivedFrom(gone, reason); }});
  reply_mailboxes = std::make_unique<runtime::ReplyMailboxes>(receive);
  multicasts = std::make_unique<runtime::MulticastService>(
      receive, *reply_mailboxes, shutting_down,
      runtime::MulticastHooks{
          .send =
              [this](Gid from, Gid to, Tag tag, std::span<const std::byte> payload) {
                return send_side.SendCopy(from, to, tag, payload);
              },
          .post_marker =
              [this](Gid from, Gid to, Tag tag, uint64_t total, Gid carrier, uint64_t nonce) {
                return send_side.PostMarker(from, to, tag, total, carrier, nonce);
              },
          .send_fill =
              [this](Gid from, Gid to, Tag tag, std::span<const std::byte> payload,
                     runtime::FillOf fill, runtime::Mailbox& wake) {
                return SendFill(from, to, tag, payload, fill, wake);
              },
          .post_no_fill = [this](Gid from, Gid to,
                                 uint64_t seq) { send_side.PostNoFill(from, to, seq); },
          .sender_mailbox = [this](Gid from) -> Result<runtime::Mailbox*> {
            TOCL_RETURN_IF_ERROR(send_side.CheckSender(from));
            return receive.LocalMailbox(from);
          }});
  spawn_service = std::make_unique<runtime::ThreadService>(
      receive, *reply_mailboxes,
      runtime::ThreadServiceHooks{
          .enroll =
              [this](std::string name, Attributes attributes) {
                return EnrollThread(std::move(name), std::move(attributes));
              },
          .leave = [this](Gid thread) { LeaveThread(thread); },
          .send =
              [this](Gid from, Gid to, Tag tag, std::span<const std::byte> payload) {
                return send_side.SendCopy(from, to, tag, payload);
              }});

  EnrollOptions enroll;
  enroll.name = options.name.empty() ? runtime::ProgramName() : options.name;
  enroll.attributes = options.attributes;
  runtime::DirectoryEvents events;
  events.on_exited = [this](Gid gid, const std::string& reason) { OnExited(gid, reason); };
  events.on_change = [this](const ChangeEvent& event) {
    runtime::ApplyClusterChange(event, routes, *reply_mailboxes, *notifier);
  };
  // The registrar reports from its own thread, which starts with the link,
  // before the networks below are opened: until they are, there is nothing
  // to report (and `rails` is still being filled).
  events.pool_stats = [this] {
    return networks_open.load(std::memory_order_acquire) ? rails.PoolStats()
                                                         : std::vector<PoolClassStats>{};
  };
  events.network_stats = [this] {
    return networks_open.load(std::memory_order_acquire) ? Networks() : std::vector<NetworkStats>{};
  };
  TOCL_ASSIGN_OR_RETURN(link,
                        runtime::DirectoryLink::Start(resolved.options.daemon_address, enroll,
                                                      options.stats_interval, std::move(events)));
  process = link->process();
  receive.SetProcess(process);
  routes.SetProcess(process);
  send_side.Open(process, num_classes);
  daemons = std::make_unique<runtime::HostDaemons>(link->client(), process,
                                                   std::move(resolved.peer_daemons));
  memberships = std::make_unique<runtime::MembershipWatches>(link->client());
  handlers = std::make_unique<runtime::HandlerDispatch>(receive, shutting_down);
  {
    const std::string secret = link->data_plane_secret();
    auto key = security::ClusterKey::FromBytes(std::as_bytes(std::span(secret)));
    if (!key.ok()) return key.status().WithContext("the daemon's data-plane secret");
    data_plane_key = *key;
  }
  // Before the endpoints are published: requests may come as soon as they are.
  spawn_service->Open(process, ShortMaxPayload());
  multicasts->Open(process);

  progress = std::make_unique<runtime::ProgressEngine>(*reactor, [this] {
    const bool queued = queue_events.RetryWaiting();
    lanes.DropBroken();
    const auto now = std::chrono::steady_clock::now();
    lanes.Housekeeping(now);
    return long_receiver.Housekeeping(now) || queued;
  });
  receive.AttachProgress(*progress);
  queue_events.AttachProgress(*progress);
  TOCL_RETURN_IF_ERROR(OpenNetworks(resolved));
  progress->Start();
  return Status::Ok();
}

Status Runtime::Impl::OpenNetworks(const runtime::ResolvedOptions& resolved) {
  std::string networks = resolved.options.networks;
  if (networks.empty()) {
    // The host's default (toclsd's `networks`), else every interface.
    auto host = link->client().Lookup(process.host());
    if (host.ok()) {
      auto it = host->attributes.find("networks");
      if (it != host->attributes.end()) networks = it->second;
    }
    if (networks.empty()) networks = "auto";
  }
  // Now, not in the first connection's handshake (a first message would
  // wait ~2 ms for OpenSSL to load).
  security::PrepareMacs();
  Status opened = rails.Open(networks,
                             runtime::Rails::Context{.self_process = process,
                                                     .num_classes = num_classes,
                                                     .options = resolved.options,
                                                     .key = data_plane_key,
                                                     .reactor = *reactor,
                                                     .budget = budget},
                             [this](int rail) { return std::make_unique<RailSink>(*this, rail); });
  for (auto& rail : rails) progress->AddSubsystem(rail->subsystem.get());
  TOCL_RETURN_IF_ERROR(opened);
  std::vector<runtime::OwnNetwork> own;
  for (const auto& rail : rails)
    own.push_back({rail->spec, rail->transport, rail->subsystem.get()});
  routes.SetNetworks(std::move(own));
  if (rails.size() == 1 && rails.front()->transport->sleeps_alone) {
    reactor->SetWakeHook(
        [subsystem = rails.front()->subsystem.get()] { subsystem->WakeSleeper(); });
  }
  if (!rails.empty()) long_receiver.AttachPool(rails.front()->subsystem->pool());
  networks_open.store(true, std::memory_order_release);
  for (auto& rail : rails) {
    TOCL_RETURN_IF_ERROR(link->PublishEndpoint(rail->spec.name, rail->published)
                             .WithContext(fmt::format("publish the {} endpoint", rail->spec.name)));
  }
  return Status::Ok();
}

Status Runtime::Impl::Shutdown(std::chrono::milliseconds flush_timeout) {
  std::lock_guard lock(shutdown_mu);
  if (shut_down.load()) return Status::Ok();
  shutting_down.store(true);
  query_stop.request_stop();
  Status result;
  // Flush: wait (polling when we can) until every queue and route is empty.
  // (No progress engine: the runtime never opened a network.)
  const bool flushed = !progress || progress->PollUntil(
                                        [this] {
                                          long_receiver.FlushAcks();
                                          return routes.Drained();
                                        },
                                        Clock::now() + flush_timeout);
  if (!flushed)
    result = DeadlineExceeded("messages were still being sent when the runtime shut down");
  // Long Isends still going fail (shutting_down is set) and their requests
  // complete; the background thread ends.
  background_sends.Stop();
  if (progress) progress->Stop();
  // Wake receivers: they return Cancelled. Then handler calls (none
  // started since shutting_down was set) return, and the pool's lead lets
  // go of the poll token.
  receive.WakeAll();
  if (handlers) handlers->Stop();
  // Receivers leave the token within their poll round; subsystems close
  // with nobody polling.
  if (progress) (void)progress->AcquireWithin(std::chrono::seconds(2));
  // Pending receive requests complete: nothing lands in an application's
  // memory after Shutdown, and a request may outlive the runtime.
  const Status cancelled(StatusCode::kCancelled, "the runtime is shutting down");
  long_receiver.CancelBound(cancelled);
  receive.CompletePosted(cancelled);
  routes.Close(Unavailable("the runtime shut down"));
  // Entry threads and callbacks see Cancelled/Unavailable from here on and
  // return; they may still leave (the link is open).
  if (memberships) memberships->StopAll();
  if (notifier) notifier->Stop();
  if (spawn_service) spawn_service->Stop();
  if (multicasts) multicasts->Stop();
  rails.Close();
  if (link) {
    (void)link->Flush(std::chrono::seconds(1));
    Status closed = link->Close();
    if (result.ok() && !closed.ok()) result = closed;
  }
  shut_down.store(true);
  return result;
}

// --- receive side -------------------------------------------------------------

Status RailSink::OnMessage(Gid from_process, buffers::SlotRef slot) {
  return impl_.OnFrame(rail_, from_process, std::move(slot));
}

bool RailSink::Congested() const {
  return !draining_gone && impl_.Congested();
}

void RailSink::OnRouteDown(Gid peer_process) {
  impl_.routes.RouteDown(peer_process, rail_);
}

bool RailSink::TryEnterLane(uint32_t lane) {
  return impl_.lanes.TryEnter(lane);
}

void RailSink::EnterLane(uint32_t lane) {
  impl_.lanes.Enter(lane);
}

void RailSink::LeaveLane(uint32_t lane) {
  impl_.lanes.Leave(lane);
}

Status Runtime::Impl::OnFrame(int rail, Gid from_process, buffers::SlotRef slot) {
  rails[rail]->CountReceived(lanes.CounterOfThisThread(),
                             wire::kHeaderBytes + slot->header().length);
  if (slot->header().flags != 0 || slot->header().kind == wire::FrameKind::kMarker) {
    TOCL_RETURN_IF_ERROR(CheckFill(from_process, slot->header()));
  }
  switch (slot->header().kind) {
    case wire::FrameKind::kMessage:
    case wire::FrameKind::kLongStart:
    case wire::FrameKind::kMarker:
      if (slot->header().kind == wire::FrameKind::kMessage && wire::Relayed(slot->header()) &&
          receive.LocalMailbox(Gid::FromRaw(slot->header().destination)).status().code() ==
              StatusCode::kInvalidArgument) {
        // A short fill for a thread never enrolled here (a carrier may
        // name any): it makes no pair (pair order state); dropped as a
        // message to a thread that does not exist is. (A long one goes on:
        // its carrier is answered; a pair it made and that holds nothing
        // is not kept, PairOrder::OnOrdered.)
        Log().debug("tocl: dropping a fill from {} for {}: no such thread here",
                    from_process.ToString(), Gid::FromRaw(slot->header().destination).ToString());
        return Status::Ok();
      }
      return lanes.OnOrdered(from_process, std::move(slot));
    case wire::FrameKind::kFragment:
      return long_receiver.OnFragment(rail, from_process, std::move(slot));
    case wire::FrameKind::kHello:
    case wire::FrameKind::kAuth:
    case wire::FrameKind::kProof:
    case wire::FrameKind::kResume:
    case wire::FrameKind::kReceived:
      return InvalidArgument("a connection's own frame (handshake or stream) among messages");
    default: {
      // Grant, ack, abort, probe: about a message we receive, or one we send.
      const wire::Header header = slot->header();
      slot.reset();
      if (runtime::FromSender(header)) return long_receiver.OnControl(rail, from_process, header);
      long_sender.OnControl(from_process, header);
      return Status::Ok();
    }
  }
}

Status Runtime::Impl::CheckFill(Gid from_process, const wire::Header& header) const {
  // Multicast's frames (wire/frame.h: markers and fills) never involve the
  // runtime's own threads: a carrier must not speak for a spawn service or
  // a reply mailbox (a packed piece's flag is not a fill's).
  if (header.kind != wire::FrameKind::kMarker && !wire::Relayed(header)) return Status::Ok();
  const Gid source = Gid::FromRaw(header.source);
  const Gid destination = Gid::FromRaw(header.destination);
  if (runtime::IsInternalThread(source) || runtime::IsInternalThread(destination)) {
    return InvalidArgument(
        fmt::format("a multicast frame (kind {}) from {} to {}: a runtime thread",
                    static_cast<unsigned>(header.kind), source.ToString(), destination.ToString()));
  }
  const bool control =
      header.kind == wire::FrameKind::kAbort || header.kind == wire::FrameKind::kProbe;
  if (control && (runtime::FromSender(header) ? destination.process() != process
                                              : source.process() != from_process)) {
    // The network let it name a thread of neither end (SourceFits,
    // DestinationFits take either way for these kinds); its tag says
    // which way it goes: a sender's toward a receiver here, a receiver's
    // from the receiver's own process. (A forged one to a made-up
    // destination would otherwise make state.)
    return InvalidArgument(
        fmt::format("a relayed {} from {} to {} (tag {}) going the other way than its tag says",
                    header.kind == wire::FrameKind::kAbort ? "abort" : "probe", source.ToString(),
                    destination.ToString(), header.tag));
  }
  return Status::Ok();
}

Status Runtime::Impl::DeliverInOrder(Gid from_process, buffers::SlotRef slot) {
  if (slot->header().kind == wire::FrameKind::kLongStart) {
    return long_receiver.OnLongStart(from_process, std::move(slot));
  }
  if (Status status = receive.Deliver(slot); !status.ok()) {
    // The sender was told the message left; the thread it was for is gone
    // (the frame is dropped with `slot`).
    Log().debug("tocl: dropping a message from {}: {}", from_process.ToString(), status.ToString());
  }
  return Status::Ok();
}

// --- long messages --------------------------------------------------------------

Status Runtime::Impl::SendLong(Gid from, Gid to, Tag tag, std::span<const std::byte> payload,
                               uint16_t flags) {
  if (payload.size() > kMaxMessageBytes) {
    return InvalidArgument(fmt::format("a {} byte message is larger than the limit of {} bytes",
                                       payload.size(), kMaxMessageBytes));
  }
  TOCL_RETURN_IF_ERROR(send_side.CheckSend(from, to, tag));
  if (to.process() == process) {
    return long_receiver.DeliverInProcess(from, to, tag, payload, flags);
  }
  TOCL_ASSIGN_OR_RETURN(runtime::SendQueue * peer, routes.PeerOf(to));
  return long_sender.Send(*peer, from, to, tag, payload, flags);
}

Status Runtime::Impl::SendFill(Gid from, Gid to, Tag tag, std::span<const std::byte> payload,
                               runtime::FillOf fill, runtime::Mailbox& wake) {
  if (shutting_down.load()) return Unavailable("the runtime is shutting down");
  if (to.process() == process) {
    // A relay's own receiver: the fill goes into its pair order here, as
    // if it had come from this process (the marker names it).
    TOCL_RETURN_IF_ERROR(receive.LocalMailbox(to).status());
    TOCL_ASSIGN_OR_RETURN(buffers::SlotRef slot,
                          long_receiver.WholeMessage(from, to, tag, payload));
    runtime::StampFill(slot->header(), fill);
    return lanes.OnOrdered(process, std::move(slot));
  }
  if (buffers::ClassFor(payload.size()) < num_classes) {
    return send_side.SendFill(from, to, tag, payload, fill);
  }
  TOCL_ASSIGN_OR_RETURN(runtime::SendQueue * peer, routes.PeerOf(to));
  return long_sender.SendFill(*peer, from, to, tag, payload, fill.seq, fill.nonce, wake);
}

void LongReceiverEvents::SendControl(Gid process, int network, const wire::Header& header) {
  impl_.routes.PostControl(process, network, header);
}

Status LongReceiverEvents::SkipInOrder(Gid from_process, const runtime::LongKey& key) {
  // A pair is made for a thread of ours only (a forged abort names any).
  const bool receiver_here = impl_.receive.LocalMailbox(Gid::FromRaw(key.destination)).ok();
  return impl_.lanes.Skip(from_process, key, receiver_here);
}

void LongReceiverEvents::HousekeepingDue(bool wake) {
  impl_.progress->NoteQueued();
  if (wake) impl_.reactor->Wake();
}

Status LongSenderEvents::ResolveLocked(runtime::SendQueue& peer,
                                       std::unique_lock<std::mutex>& lock) {
  return impl_.routes.ResolvePeer(peer, lock);
}

std::string LongSenderEvents::NetworkName(int network) const {
  return impl_.rails[network]->Describe();
}

void LongSenderEvents::NetworkFailed(int network) {
  impl_.rails[network]->NoteFailure();
}

void LongSenderEvents::ListenForBells(bool on) {
  impl_.progress->ListenForBells(on);
}

std::vector<tocl::NetworkStats> Runtime::Impl::Networks() const {
  std::vector<tocl::NetworkStats> out = rails.Stats();
  routes.AddSentStats(out);
  return out;
}

void Runtime::Impl::OnExited(Gid gid, const std::string& reason) {
  exited_senders.Note(gid, reason);
  if (gid.is_process()) {
    long_receiver.SenderExited(gid, reason);
    // Fills it was to carry for others (multicast) will not come.
    lanes.CarrierGone(gid);
  }
  routes.Exited(gid, reason);
}

void Runtime::Impl::DeliverArrivedFrom(Gid gone, const std::string& reason) {
  if (!networks_open.load(std::memory_order_acquire)) return;
  const Gid from = gone.process();
  // A thread of ours delivered what it sent as it sent it.
  if (from == process) return;
  // A process that exited: everything it left, which may still be arriving.
  // A thread that left while its process runs: what is here now. The
  // directory reports a process's threads just before the process itself:
  // a thread's notice may be the first sign that its process exited.
  auto process_exited = [&] {
    auto entity = daemons->Lookup(from);
    return entity.ok() && entity->state == EntityState::kExited;
  };
  const bool exited = gone.is_process() || process_exited();
  const auto deadline = Clock::now() + kDrainGoneFor;
  auto pause = std::chrono::microseconds(100);
  for (;;) {
    if (shutting_down.load() || !progress->AcquireFor(drain_waiter, deadline)) break;
    draining_gone = true;
    const bool empty = progress->DrainFrom(from);
    draining_gone = false;
    // Back to whoever polls for the process, so that arrivals still wake
    // sleeping receivers at once.
    progress->ReleaseToProgressThread();
    if (empty || !exited) break;
    if (Clock::now() >= deadline) {
      Log().warn(
          "tocl: {} ms after {} exited, not all it sent was delivered (a connection of it "
          "has not ended, or this process's buffer pool is at its cap); its exit notice goes "
          "first",
          std::chrono::duration_cast<std::chrono::milliseconds>(kDrainGoneFor).count(),
          from.ToString());
      break;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(10));
  }
  // A long message whose start came in just now cannot complete any more:
  // it fails before the notice, not after it.
  if (exited) long_receiver.SenderExited(from, reason);
}

// --- Runtime ------------------------------------------------------------------

Runtime::Runtime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Runtime::~Runtime() {
  if (impl_->handlers && impl_->handlers->InCall()) {
    // Shutdown would wait for this very call to return, and the call runs
    // on what is being freed: a hang at best. As std::thread's join of
    // itself, a programming error that cannot be reported otherwise.
    Log().critical(
        "tocl: Runtime {} destroyed from inside one of its own message handler calls (the "
        "destructor would wait for that call forever); aborting",
        impl_->process.ToString());
    Log().flush();
    std::abort();
  }
  // While this object is whole: entry threads hold a reference to it.
  (void)impl_->Shutdown(std::chrono::milliseconds(0));
}

Result<std::unique_ptr<Runtime>> Runtime::Start(RuntimeOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  TOCL_RETURN_IF_ERROR(impl->Open());
  std::unique_ptr<Runtime> runtime(new Runtime(std::move(impl)));
  runtime->impl_->spawn_service->Start(*runtime);
  runtime->impl_->multicasts->Start();
  return runtime;
}

Gid Runtime::gid() const {
  return impl_->process;
}
const RuntimeOptions& Runtime::options() const {
  return impl_->options;
}

Status Runtime::Shutdown(std::chrono::milliseconds flush_timeout) {
  if (impl_->handlers && impl_->handlers->InCall()) {
    return FailedPrecondition("Shutdown from a message handler (it waits for the handler's call)");
  }
  return impl_->Shutdown(flush_timeout);
}

Result<Gid> Runtime::Impl::EnrollThread(std::string name, Attributes attributes) {
  if (shutting_down.load()) return Unavailable("the runtime is shutting down");
  TOCL_RETURN_IF_ERROR(ValidateName("thread name", name));
  TOCL_RETURN_IF_ERROR(ValidateAttributes(attributes));
  const uint32_t index = next_thread.fetch_add(1);
  if (index >= runtime::kFirstInternalThread) {
    return ResourceExhausted(
        fmt::format("this process has used all {} thread ids", runtime::kFirstInternalThread - 1));
  }
  const Gid gid = Gid::Thread(process, index);
  receive.AddThread(gid);
  link->QueueRegister(ThreadInfo{gid, std::move(name), std::move(attributes)});
  return gid;
}

void Runtime::Impl::LeaveThread(Gid thread) {
  if (!receive.Leave(thread)) return;
  link->QueueUnregister(thread);
  notifier->CancelFor(thread);
}

size_t Runtime::Impl::ShortMaxPayload() const {
  return buffers::ClassBytes(num_classes - 1) - wire::kHeaderBytes;
}

Result<Gid> Runtime::EnrollThread(std::string name, Attributes attributes) {
  return impl_->EnrollThread(std::move(name), std::move(attributes));
}

Status Runtime::LeaveThread(Gid thread) {
  TOCL_ASSIGN_OR_RETURN(Mailbox * mailbox, impl_->receive.LocalMailbox(thread));
  (void)mailbox;
  impl_->LeaveThread(thread);
  return Status::Ok();
}

Result<Buffer> Runtime::GetBuffer(size_t size, Network network, AtCap at_cap,
                                  std::chrono::milliseconds timeout) {
  return impl_->rails.GetBuffer(size, network, at_cap, DeadlineAfter(timeout));
}

std::vector<PoolClassStats> Runtime::PoolStats() const {
  return impl_->rails.PoolStats();
}

size_t Runtime::short_max_payload() const {
  return impl_->ShortMaxPayload();
}

Status Runtime::Send(Gid from, Gid to, Tag tag, Buffer&& buffer) {
  return impl_->send_side.SendBuffer(from, to, tag, std::move(buffer));
}

Status Runtime::Send(Gid from, Gid to, Tag tag, Buffer& buffer) {
  return impl_->send_side.SendBuffer(from, to, tag, buffer);
}

Status Runtime::Send(Gid from, Gid to, Tag tag, std::span<const std::byte> payload) {
  TOCL_RETURN_IF_ERROR(runtime::CheckUserEnds(from, to));
  return impl_->send_side.SendCopy(from, to, tag, payload);
}

Result<Buffer> Runtime::Recv(Gid self, Gid source, TagMatch tag) {
  return impl_->receive.Receive(self, Selector{source, tag}, Clock::time_point::max(), true);
}

Result<Buffer> Runtime::RecvFor(Gid self, std::chrono::nanoseconds timeout, Gid source,
                                TagMatch tag) {
  return impl_->receive.Receive(self, Selector{source, tag}, DeadlineAfter(timeout), true);
}

Result<Buffer> Runtime::TryRecv(Gid self, Gid source, TagMatch tag) {
  return impl_->receive.Receive(self, Selector{source, tag}, Clock::now(), false);
}

Result<MessageInfo> Runtime::Probe(Gid self, std::chrono::nanoseconds timeout, Gid source,
                                   TagMatch tag) {
  return impl_->receive.Probe(self, Selector{source, tag}, DeadlineAfter(timeout), true);
}

Result<MessageInfo> Runtime::TryProbe(Gid self, Gid source, TagMatch tag) {
  return impl_->receive.Probe(self, Selector{source, tag}, Clock::now(), false);
}

Result<MessageInfo> Runtime::RecvInto(Gid self, std::span<std::byte> out, Gid source,
                                      TagMatch tag) {
  return impl_->receive.ReceiveInto(self, Selector{source, tag}, out, Clock::time_point::max());
}

Result<MessageInfo> Runtime::RecvIntoFor(Gid self, std::span<std::byte> out,
                                         std::chrono::nanoseconds timeout, Gid source,
                                         TagMatch tag) {
  return impl_->receive.ReceiveInto(self, Selector{source, tag}, out, DeadlineAfter(timeout));
}

std::vector<NetworkStats> Runtime::Networks() const {
  return impl_->Networks();
}

Result<Entity> Runtime::Lookup(Gid gid) {
  if (impl_->shutting_down.load()) return Unavailable("the runtime is shutting down");
  return impl_->daemons->Lookup(gid);
}

Result<std::vector<Entity>> Runtime::Query(std::string_view expression, size_t limit) {
  if (impl_->shutting_down.load()) return Unavailable("the runtime is shutting down");
  return runtime::QueryEntities(impl_->link->client(), expression, limit);
}

Result<std::vector<Entity>> Runtime::WaitForQuery(std::string_view expression, size_t count,
                                                  std::chrono::milliseconds timeout) {
  return runtime::AwaitMatches(impl_->link->client(), expression, count, timeout,
                               impl_->query_stop.get_token());
}

Result<MulticastResult> Runtime::Multicast(Gid from, std::span<const Gid> to, Tag tag,
                                           std::span<const std::byte> payload,
                                           MulticastOptions options) {
  return impl_->multicasts->Send(from, to, tag, payload, options);
}

Result<MulticastResult> Runtime::Multicast(Gid from, std::string_view query, Tag tag,
                                           std::span<const std::byte> payload,
                                           MulticastOptions options) {
  if (impl_->shutting_down.load()) return Unavailable("the runtime is shutting down");
  TOCL_RETURN_IF_ERROR(impl_->send_side.CheckSender(from));
  // Resolved now: the threads that match when it is sent.
  TOCL_ASSIGN_OR_RETURN(std::vector<Entity> matches,
                        runtime::QueryEntities(impl_->link->client(), query, 0));
  std::vector<Gid> to;
  for (const Entity& entity : matches) {
    if (entity.gid.is_thread() && entity.gid != from && entity.state != EntityState::kExited) {
      to.push_back(entity.gid);
    }
  }
  if (to.empty()) {
    return NotFound(fmt::format("multicast: the query '{}' matches no thread (of {} entities)",
                                query, matches.size()));
  }
  return impl_->multicasts->Send(from, to, tag, payload, options);
}

Gid Runtime::parent() const {
  return impl_->parent;
}

Result<SpawnedProcess> Runtime::SpawnProcess(Gid from, SpawnOptions options) {
  TOCL_RETURN_IF_ERROR(impl_->send_side.CheckSender(from));
  if (runtime::IsInternalThread(from)) return ReservedThread(from);
  options.parent = from;
  return impl_->link->client().SpawnProcess(options);
}

Result<Gid> Runtime::SpawnThread(Gid from, Gid process, std::string_view entry,
                                 std::span<const std::byte> payload,
                                 std::chrono::milliseconds timeout) {
  if (runtime::IsInternalThread(from)) return ReservedThread(from);
  TOCL_RETURN_IF_ERROR(impl_->send_side.CheckSender(from));
  if (impl_->shutting_down.load()) return Unavailable("the runtime is shutting down");
  return impl_->spawn_service->SpawnThread(from, process, entry, payload, timeout);
}

Result<uint64_t> Runtime::Notify(Gid self, Gid target, Tag tag) {
  TOCL_ASSIGN_OR_RETURN(Mailbox * mailbox, impl_->receive.LocalMailbox(self));
  (void)mailbox;
  TOCL_RETURN_IF_ERROR(runtime::CheckSendableTag(tag));
  if (runtime::IsInternalThread(target)) return ReservedThread(target);
  return impl_->notifier->Watch(target, self, tag, {});
}

Result<uint64_t> Runtime::Notify(Gid target, std::function<void(const ExitNotice&)> callback) {
  if (!callback) return InvalidArgument("Notify needs a callback");
  if (runtime::IsInternalThread(target)) return ReservedThread(target);
  return impl_->notifier->Watch(target, Gid(), 0, std::move(callback));
}

Status Runtime::CancelNotify(uint64_t id) {
  return impl_->notifier->Cancel(id);
}

Result<uint64_t> Runtime::WatchMembers(std::string_view expression, MembershipCallback callback) {
  if (impl_->shutting_down.load()) return Unavailable("the runtime is shutting down");
  return impl_->memberships->Start(expression, std::move(callback));
}

Status Runtime::CancelWatchMembers(uint64_t id) {
  return impl_->memberships->Cancel(id);
}

}  // namespace tocl
