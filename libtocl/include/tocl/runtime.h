// The tocl runtime: one per process. It enrolls the process with the local
// toclsd, opens the networks (shm for processes on the same host, tcp for
// the others), publishes their addresses in the directory, and lets any
// enrolled thread send messages to any other thread of the cluster by Gid.
//
//   auto runtime = tocl::Runtime::Start({.name = "pinger"});
//   if (!runtime.ok()) { fmt::print("{}\n", runtime.status().ToString()); return 2; }
//   tocl::Gid me = *(*runtime)->EnrollThread("main");
//   (*runtime)->Send(me, peer, /*tag=*/1, std::as_bytes(std::span("ping")));
//   tocl::Result<tocl::Buffer> reply = (*runtime)->Recv(me, peer, 1);
//
// Ids: EnrollThread numbers the thread in-process (no round trip) and
// registers it with the daemon in the background (at once, or with the
// others queued meanwhile; see "the directory" below); anyone who has the
// Gid may send to it at once.
//
// Order: messages from one sending thread to one receiving thread are
// received in the order they were sent, among those a selector matches
// (MPI's non-overtaking rule). Nothing is lost or duplicated: a message is
// either received exactly once or its sender is told it failed (Send
// returned an error, or its buffer ends kFailed). A buffer becomes kSent
// only once the receiving process has the message (tcp: acknowledged by
// it; shm: in its memory). A connection that breaks while the peer runs
// is made again (at once, then with backoff) and what the peer had not
// acknowledged is sent again, over it or at once over another network
// that reaches the peer; the receiver drops second copies. The peer is
// failed only when its process exits (the directory says so), its host
// goes down, or no network has reached it for
// RuntimeOptions::unreachable_timeout: then every message it had not
// acknowledged ends kFailed (a message may have arrived just before its
// receiver died: kFailed means "not known to have arrived").
//
// Progress: there are no busy threads. A thread blocked in Recv polls the
// networks itself for a short while (RuntimeOptions::spin) and then sleeps;
// one thread polls at a time and hands other threads their messages. One
// background thread keeps things moving while no thread is receiving.
//
// Flow control: each process bounds the memory its unexpected (arrived, not
// yet received) messages use; when it is full, senders to it are slowed
// (their sends wait in the send queue, Send itself blocks only when that
// queue is full), nothing is dropped.
//
// Hosts that go down: when the local daemon says a host stopped answering
// heartbeats, messages queued for its processes fail (their buffers end
// kFailed) and sends to it fail at once with Unavailable "host h3 is down
// (no heartbeat)" until it answers again; the next send then reconnects.
//
// Spawn: SpawnProcess starts a process on any host (through the daemons);
// SpawnThread starts a thread running a registered entry (tocl/entry.h) in
// any running process, over the messaging networks (not the daemons).
// Notify reports once when a thread, process or host goes away;
// WatchMembers follows the members of a query as they join and leave.
//
// Reserved thread ids: the runtime keeps the last kInternalThreads thread
// indexes of each process for itself (the spawn service and the private
// mailboxes its replies come to); they are never enrolled, never in the
// directory, and Send/Recv refuse them.
//
// Threading: every method may be called from any thread. Recv (and Irecv)
// for a given thread Gid should be called by one thread at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tocl/buffer.h"
#include "tocl/entity.h"
#include "tocl/entry.h"
#include "tocl/exit_notice.h"
#include "tocl/export.h"
#include "tocl/gid.h"
#include "tocl/handler.h"
#include "tocl/membership.h"
#include "tocl/message_info.h"
#include "tocl/multicast.h"
#include "tocl/network_stats.h"
#include "tocl/packed_message.h"
#include "tocl/pool_stats.h"
#include "tocl/request.h"
#include "tocl/runtime_options.h"
#include "tocl/spawn.h"
#include "tocl/status.h"
#include "tocl/tag_match.h"

namespace tocl {

// Thread indexes Gid::kMaxThread + 1 - kInternalThreads .. Gid::kMaxThread
// belong to the runtime (see above).
inline constexpr uint32_t kInternalThreads = 4096;

// What a SpawnThread request needs besides the payload: its header and the
// longest entry name.
inline constexpr size_t kSpawnThreadOverhead = 192;

// The largest message Send takes (1 TiB).
inline constexpr uint64_t kMaxMessageBytes = uint64_t{1} << 40;

class TOCL_EXPORT Runtime {
 public:
  // Enrolls the process and opens its networks. Unavailable when no daemon
  // answers at the address; InvalidArgument for bad options.
  static Result<std::unique_ptr<Runtime>> Start(RuntimeOptions options = {});

  // Shutdown(), then frees everything. Buffers still held by the application
  // must have been released before. Not from one of its own message
  // handler calls: that logs why and aborts the process (tocl/handler.h).
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  Gid gid() const;  // the process
  // The options as given to the runtime: what they left empty stays empty
  // here (the environment's and the host's settings are not filled in).
  const RuntimeOptions& options() const;

  // Flushes what was sent (up to `flush_timeout`), wakes every thread
  // blocked in Recv/Probe (they return Cancelled "the runtime is shutting
  // down"; later sends return Unavailable), completes every pending request
  // (receives: Cancelled; long Isends: Unavailable), waits for the threads
  // spawned by SpawnThread to return from their entries, unregisters, says
  // goodbye to the daemon and closes the networks. Idempotent. Not from an entry thread
  // or a notification callback. Handlers (tocl/handler.h): no call starts
  // once Shutdown begins, the running ones are waited for (after the wake-up
  // above), then every handler is cancelled. FailedPrecondition from a
  // handler's call.
  Status Shutdown(std::chrono::milliseconds flush_timeout = std::chrono::seconds(5));

  // --- threads -------------------------------------------------------------
  // Gives the calling thread (or any unit of work that will receive) a Gid
  // at once; the directory learns of it in the background.
  Result<Gid> EnrollThread(std::string name, Attributes attributes = {});
  // Unregisters a thread: later sends to it fail; messages waiting for it
  // are dropped (their senders were told they were delivered).
  Status LeaveThread(Gid thread);

  // --- the directory -----------------------------------------------------------
  // Finding peers: what the directory knows of hosts, processes and threads
  // anywhere in the cluster, asked of this process's daemon over the
  // connection the runtime already holds (no second client). In a cluster
  // the local daemon answers for every host, from its replica.
  //
  //   // Wait until two mergers run, then send each one its share.
  //   auto mergers = runtime->WaitForQuery("kind=thread and role=merger", 2,
  //                                        std::chrono::seconds(10));
  //   if (!mergers.ok()) return fail(mergers.status());  // "deadline exceeded: 1 of the 2 ..."
  //   for (const tocl::Entity& merger : *mergers) runtime->Send(me, merger.gid, 1, share);
  //
  // Visibility: EnrollThread returns before the directory has the thread.
  // The runtime sends it to its daemon at once (threads that enroll while
  // a registration is on its way go together in the next), so a query on
  // the same host sees it one registration call later, and on other hosts
  // after replication: milliseconds (p99 under 10 ms on one 2-vCPU VM,
  // either way; tocl-bench visibility, libtocl/README.md). WaitForQuery is
  // the way to wait for it.
  //
  // Threading: any thread, concurrently; each call blocks its caller only
  // (messaging goes on). The results are copies, the caller's to keep.
  // Errors: Unavailable when the daemon cannot be reached (or the runtime
  // is shutting down), and the daemon's codes.

  // The entity `gid` names. NotFound when the directory has no such entity
  // (for another host's: also when that host is not a member of the
  // cluster); InvalidArgument for an invalid id.
  Result<Entity> Lookup(Gid gid);
  // The entities matching `expression` (the query language of the
  // directory's README: "kind=thread and role=merger and host=h4"), in Gid
  // order: every match when `limit` is 0 (ResourceExhausted past a
  // million), else the first `limit`. InvalidArgument for a query that
  // does not parse, naming the position: "query: at position 5: expected a
  // value after '='".
  Result<std::vector<Entity>> Query(std::string_view expression, size_t limit = 0);
  // Waits until at least `count` entities match `expression`, then returns
  // the first `count` of them in Gid order. Sleeps on the directory's
  // change stream meanwhile and asks again after each change (a burst of
  // changes costs one question), so it answers within one query of the
  // change that completes the match, and costs nothing while nothing
  // changes. DeadlineExceeded when `timeout` passes first, saying how many
  // matched; InvalidArgument for count 0 or a bad query (at once);
  // Cancelled when the runtime shuts down meanwhile. While the daemon
  // cannot be reached (a restart) it keeps asking, with pauses of 20 ms
  // growing to 0.5 s, until the timeout.
  Result<std::vector<Entity>> WaitForQuery(std::string_view expression, size_t count,
                                           std::chrono::milliseconds timeout);

  // --- buffers (bfget) -------------------------------------------------------
  // A buffer whose capacity() >= size. InvalidArgument when size plus the
  // header exceeds the short maximum; at the pool cap waits up to `timeout`
  // or fails with ResourceExhausted (AtCap::kFail).
  Result<Buffer> GetBuffer(size_t size, Network network = Network::kFastest,
                           AtCap at_cap = AtCap::kWait,
                           std::chrono::milliseconds timeout = std::chrono::hours(24));
  std::vector<PoolClassStats> PoolStats() const;
  size_t short_max_payload() const;  // the largest payload of one message

  // --- send ------------------------------------------------------------------
  // Sends `buffer` from thread `from` (enrolled in this process) to thread
  // `to` with `tag`. By rvalue the buffer returns to its pool once sent; by
  // lvalue the caller keeps it (see Buffer). Returns once the message is
  // queued: ok does not mean delivered. Errors: InvalidArgument (bad ids,
  // tag, buffer), NotFound (no such thread or process), FailedPrecondition
  // (the destination has exited), Unavailable (cannot reach it). A thread
  // the directory does not know while its process runs may not be
  // registered yet: Send waits for it up to connect_timeout, then NotFound;
  // so does a thread that left long enough ago for its daemon to remove it
  // (retain_exited_seconds) while its process goes on.
  Status Send(Gid from, Gid to, Tag tag, Buffer&& buffer);
  Status Send(Gid from, Gid to, Tag tag, Buffer& buffer);
  // Sends `payload` from user memory, any size up to kMaxMessageBytes. Up to
  // short_max_payload() it is copied into a pool buffer and sent as above.
  // A longer one is cut into fragments sent over every network that reaches
  // the destination at once (weighted by the bandwidth each has shown), and
  // Send returns once the receiver holds all of it: `payload` may be reused
  // then. If a network fails mid-message its fragments go over the others;
  // if none is left Send returns Unavailable and the receiver discards what
  // it had. Long messages keep the order of the short ones between the same
  // two threads.
  Status Send(Gid from, Gid to, Tag tag, std::span<const std::byte> payload);

  // --- receive ---------------------------------------------------------------
  // The next message for thread `self` whose source and tag match. `source`
  // may be a thread, a process (any of its threads), a host (any thread on
  // it) or Gid() for any source; `tag` an exact tag, kAnyTag, or a masked
  // selector (TagMatch::Masked, tocl/tag_match.h). A long message comes
  // whole, in one Buffer of library memory (capacity() == size()); dropping
  // the Buffer frees it. A message that a receive request posted earlier
  // matches (Irecv, IrecvInto) is that request's, not Recv's.
  Result<Buffer> Recv(Gid self, Gid source = Gid(), TagMatch tag = kAnyTag);
  // DeadlineExceeded when nothing matched within `timeout`.
  Result<Buffer> RecvFor(Gid self, std::chrono::nanoseconds timeout, Gid source = Gid(),
                         TagMatch tag = kAnyTag);
  // TryAgain when no matching message is there now.
  Result<Buffer> TryRecv(Gid self, Gid source = Gid(), TagMatch tag = kAnyTag);
  // Like RecvFor/TryRecv but leaves the message where it is.
  Result<MessageInfo> Probe(Gid self, std::chrono::nanoseconds timeout, Gid source = Gid(),
                            TagMatch tag = kAnyTag);
  Result<MessageInfo> TryProbe(Gid self, Gid source = Gid(), TagMatch tag = kAnyTag);
  // Receives the next matching message into `out` (any size): a long
  // message whose first fragment arrives while the caller waits here is
  // placed straight into `out` (no other copy); one that arrived before is
  // copied from library memory. InvalidArgument when the message is larger
  // than `out` (it stays queued: receive it with a larger buffer or Recv).
  Result<MessageInfo> RecvInto(Gid self, std::span<std::byte> out, Gid source = Gid(),
                               TagMatch tag = kAnyTag);
  Result<MessageInfo> RecvIntoFor(Gid self, std::span<std::byte> out,
                                  std::chrono::nanoseconds timeout, Gid source = Gid(),
                                  TagMatch tag = kAnyTag);

  // --- non-blocking requests (tocl/request.h) --------------------------------
  // Send, returning a request. A Buffer, or a payload up to
  // short_max_payload(), is queued as Send queues it (blocking as Send does
  // when the destination's queue is full) and the request is complete at
  // once. A longer payload has its start numbered and posted now (so it
  // keeps its place among `from`'s messages to `to`) and is carried on by
  // the runtime's background thread; the request completes when Send would
  // have returned: Ok once the receiver holds all of it, else Send's error.
  // `payload` must stay valid and unchanged until then. Errors that Send
  // returns at once (bad ids, unknown thread, ...) are returned here.
  Result<Request> Isend(Gid from, Gid to, Tag tag, Buffer&& buffer);
  Result<Request> Isend(Gid from, Gid to, Tag tag, Buffer& buffer);
  Result<Request> Isend(Gid from, Gid to, Tag tag, std::span<const std::byte> payload);
  // Posts a receive for thread `self` (enrolled here): the request
  // completes with the next message that matches and that no receive
  // posted earlier takes (TakeBuffer), taken from the queue at once if one
  // is there. InvalidArgument / FailedPrecondition for `self` as Recv.
  Result<Request> Irecv(Gid self, Gid source = Gid(), TagMatch tag = kAnyTag);
  // The same into `out`, which must stay valid until the request completes
  // or is destroyed: a long message whose start arrives while the request
  // is posted lands straight in `out`; one that was there before is copied
  // when the request is found complete (Wait, Test). The request fails with
  // InvalidArgument when the message is larger than `out` (the message
  // stays queued for others).
  Result<Request> IrecvInto(Gid self, std::span<std::byte> out, Gid source = Gid(),
                            TagMatch tag = kAnyTag);

  // --- message handlers (tocl/handler.h) -------------------------------------
  // Runs `handler` for every message to `thread` from `source` (a thread,
  // process, host or Gid() for any) whose tag `tag` matches, on the
  // runtime's handler threads, from the messages already waiting there on.
  // `source` and `tag` select as they do for Recv (bits of tag.tag outside
  // tag.mask are ignored).
  // `thread` is an enrolled thread of this process, or Gid(): the runtime
  // enrolls a new one (options.thread_name, options.attributes) for the
  // handler; either way the registration says which. Errors:
  // InvalidArgument for an empty handler, a `thread` that is not an
  // enrolled thread of this process (or a reserved one), a `source` that is
  // not a valid Gid, max_concurrent_calls 0 for an unordered handler, and
  // the thread name or attributes EnrollThread refuses; FailedPrecondition
  // when `thread` has left; Unavailable when the runtime is shutting down.
  Result<HandlerRegistration> RegisterHandler(Gid thread, Gid source, TagMatch tag,
                                              HandlerFunction handler, HandlerOptions options = {});
  // Cancels a handler: once this returns no call of it runs or will start,
  // and the messages it had not started a call for stay on its thread (from
  // inside its own call it does not wait for that call: tocl/handler.h).
  // NotFound for an id that is not a handler (or was cancelled already).
  Status CancelHandler(HandlerId id);

  // --- packed messages (tocl/packed_message.h) ---------------------------------
  // Starts a packed message from thread `from` (enrolled here) to thread
  // `to` with `tag` (its header's tag). Nothing is sent until the first
  // segment fills, a by-reference range is packed, or End. Errors: those
  // Send returns at once (bad ids, kAnyTag, shutting down).
  Result<PackedWriter> BeginPacked(Gid from, Gid to, Tag tag, PackedOptions options = {});
  // A reader over the packed message whose header `header` is (a message
  // Recv, a request or a handler returned to thread `self`); the rest of
  // the message is received for `self` as it is unpacked. DataLoss for a
  // message that is not a packed message's header ("not a packed message
  // (magic ...)"); InvalidArgument / FailedPrecondition for `self` as Recv.
  Result<PackedReader> OpenPacked(Gid self, Buffer header);
  // Recv, then OpenPacked.
  Result<PackedReader> RecvPacked(Gid self, Gid source = Gid(), TagMatch tag = kAnyTag);
  // A header handler (Madeleine's): a message handler (RegisterHandler:
  // same selectors, options, threads, ordering, cancel and errors) for
  // packed messages. Each call reads the header with `header` and places
  // the byte ranges after it where the placement says, received straight
  // into that memory, then calls `done`, on the same handler thread, with
  // the outcome (packed_message.h: PackedCompletion). A message that is not
  // packed, a header function that fails or throws, a placement that does
  // not fit, a sender that exits midway: `done` is told the error, the rest
  // of the message is received and dropped, and the handler goes on with
  // the next. InvalidArgument for an empty function. A call lasts until
  // its message's last piece arrives, so CancelHandler, which waits for the
  // running calls, waits for a live sender to finish its message (or to
  // exit) however long that takes.
  Result<HandlerRegistration> RegisterPackedHandler(Gid thread, Gid source, TagMatch tag,
                                                    PackedHeaderFunction header,
                                                    PackedDoneFunction done,
                                                    HandlerOptions options = {});

  // --- multicast (tocl/multicast.h) ----------------------------------------------
  // Sends `payload` from thread `from` (enrolled here) to every thread of
  // `to` with `tag`, once per other host (relays fan it out there), each
  // receiver getting it in its place among `from`'s messages to it.
  // Returns once every receiver's outcome is known (multicast.h says what
  // each means); a receiver that is gone is reported there, and the others
  // still get it. Errors (nothing sent): InvalidArgument for bad use (an
  // empty list, an id that is not a thread's, one twice, `from` among them,
  // kAnyTag, a payload over kMaxMessageBytes), Unavailable once shutting
  // down.
  Result<MulticastResult> Multicast(Gid from, std::span<const Gid> to, Tag tag,
                                    std::span<const std::byte> payload,
                                    MulticastOptions options = {});
  // The same to every thread that `query` (Query's language) matches when
  // it is called, but `from` itself (a query's result never includes its
  // sender), in Gid order. NotFound "multicast: the query '...' matches no
  // thread" when there is none; InvalidArgument for a query that does not
  // parse; Query's other errors.
  Result<MulticastResult> Multicast(Gid from, std::string_view query, Tag tag,
                                    std::span<const std::byte> payload,
                                    MulticastOptions options = {});

  // --- networks ---------------------------------------------------------------
  // The open networks with their traffic counters and the bandwidth learned
  // per destination.
  std::vector<NetworkStats> Networks() const;

  // --- spawn -------------------------------------------------------------------
  // The thread that spawned this process ($TOCL_PARENT, set by the daemon
  // that spawned it); null when it was not spawned by a thread. A malformed
  // $TOCL_PARENT makes Start fail with InvalidArgument.
  Gid parent() const;

  // Spawns a process through the daemons (DirectoryClient::SpawnProcess)
  // with `from` (a thread of this process) as its parent. Same errors, and
  // InvalidArgument when `from` is not an enrolled thread of this process.
  Result<SpawnedProcess> SpawnProcess(Gid from, SpawnOptions options);

  // Starts a thread in `process` (any running process of the cluster, this
  // one included) that runs the entry registered there as `entry` with
  // `payload`; returns the new thread's Gid once it is enrolled (it can
  // receive at once; the directory learns of it in the background). The
  // request and reply travel over the messaging networks, not the daemons.
  // `payload` plus `entry` must fit in one short message:
  // short_max_payload() - kSpawnThreadOverhead bytes (64 KiB messages leave
  // 65,216 for both). Errors: InvalidArgument (bad ids, entry name, payload
  // too large), NotFound "process h2.p3 has no entry named 'x' (registered:
  // a, b)" and the errors of Send (NotFound for an unknown process,
  // FailedPrecondition when it has exited, Unavailable when its host is
  // down: also when that is learnt while waiting), DeadlineExceeded when no
  // reply came within `timeout` (the thread may still have been started),
  // ResourceExhausted when the process has used all its thread ids.
  Result<Gid> SpawnThread(Gid from, Gid process, std::string_view entry,
                          std::span<const std::byte> payload = {},
                          std::chrono::milliseconds timeout = std::chrono::seconds(5));

  // --- notifications -------------------------------------------------------------
  // Sends thread `self` (enrolled here) exactly one message from `target`
  // with `tag` when `target` (a thread, process or host) exits or becomes
  // unreachable: a thread when it leaves, its process exits or its host goes
  // down; a process when it exits or its host goes down; a host when it goes
  // down. The payload is an ExitNotice (ParseExitNotice). A target that has
  // already exited or is unreachable is reported at once (also one the
  // directory removed after the daemon's retain_exited_seconds: the reason
  // says it was removed). Returns the id to
  // cancel it with. NotFound for an unknown process or host (a thread the
  // directory does not know yet is accepted while its process runs: threads
  // are registered in the background); InvalidArgument for bad ids or
  // kAnyTag. If `self` leaves first, the notice is dropped.
  //
  // Exit ordering (Erlang's guarantee for monitors): what a process sent
  // before it exited or was killed is received before the notice of its
  // exit, or never, not after it: before a notice that a process (or a
  // thread of it) exited is delivered, the runtime delivers everything
  // from that process that has reached this one (over shm and tcp; its tcp
  // connections read to their end), past the unexpected-message cap if
  // need be. Messages still in the dead process's own send queue are lost
  // with it. Exceptions: at the buffer pool's cap, frames kept out for more
  // than 2 s let the notice go first (a warning says so); via does not
  // drain yet. For a thread that leaves while its process runs, what it
  // sent that has reached this process comes first (what its process still
  // had queued may come later). Notices of hosts that stop answering are
  // not ordered against messages.
  Result<uint64_t> Notify(Gid self, Gid target, Tag tag);
  // The same, calling `callback` instead of sending a message. Callbacks run
  // on the runtime's notification thread, one at a time, in the order the
  // events came: do not block in them (a blocked callback holds up every
  // later notice; messaging goes on). They may call any Runtime method but
  // Shutdown.
  Result<uint64_t> Notify(Gid target, std::function<void(const ExitNotice&)> callback);
  // Cancels a notification: once this returns ok, it will not be delivered.
  // NotFound when it was delivered (or is being delivered) or never existed.
  Status CancelNotify(uint64_t id);

  // --- membership (tocl/membership.h) ---------------------------------------------
  // Calls `callback` with every entity that matches `expression` (the
  // query language of Query) and runs: first the current members (kJoined
  // each, then kCurrent), then as they join, leave, become unreachable and
  // come back, with no gap and no duplicate between the two; through daemon
  // restarts too. Callbacks run on a thread of the watch's own, one at a
  // time (membership.h says what they may do). Returns the id to cancel it
  // with. The first read of the set happens here: InvalidArgument for an
  // empty callback or a query that does not parse (the daemon's "query: at
  // position N: ..."), Unavailable when the daemon cannot be reached or
  // the runtime is shutting down. Shutdown cancels every watch.
  Result<uint64_t> WatchMembers(std::string_view expression, MembershipCallback callback);
  // Cancels a watch: once this returns, no callback of it runs or will start
  // (from its own callback: none starts after the current one). NotFound
  // for an id that is not a watch (or was cancelled already).
  Status CancelWatchMembers(uint64_t id);

  struct TOCL_NO_EXPORT Impl;  // the library's insides: not exported

 private:
  explicit Runtime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tocl
