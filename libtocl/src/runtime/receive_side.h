// The receive side of a process (the ToCL paper's receive queues): a
// mailbox per enrolled thread, the memory that messages nobody received yet
// hold (flow control), and how a receiving thread waits.
//
// The wait policy: a thread in Recv first looks in its mailbox; then, while
// it is eager (it received something in the last kEagerWait), it takes the
// poll token and polls the networks for itself, spinning for
// RuntimeOptions::spin and then sleeping in the reactor (ProgressEngine).
// When another thread holds the token it drains its own receive lane
// (receive_lanes.h) for the spin budget, then sleeps on its mailbox and the
// token holder hands it its messages. An idle receiver looks once and
// sleeps on its mailbox: the busy ones (or the progress thread) poll.
//
// It sees the runtime only through its hooks; the progress engine is
// attached when the networks are open (before any thread can wait).
//
// Threading: every method may be called from any thread; Deliver is the
// poller's (or a sending thread's, in-process).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "buffers/slot_ref.h"
#include "runtime/mailbox.h"
#include "runtime/progress_engine.h"
#include "tocl/buffer.h"
#include "tocl/gid.h"
#include "tocl/runtime.h"
#include "tocl/status.h"

namespace tocl::runtime {

class ReceiveSide {
 public:
  using Clock = std::chrono::steady_clock;

  struct Hooks {
    // The memory held by unreceived messages fell below the cap: a sleeping
    // poller must provide buffers and read paused connections again.
    std::function<void()> wake_poller;
    // A RecvInto is posted: long messages waiting for memory may take its
    // buffer.
    std::function<void()> receive_posted;
    // A receive that a long message was bound to gives up: the message
    // moves to library memory and stays queued (true), unless it completed
    // the receive first (false).
    std::function<bool(PostedReceive&)> unbind_posted;
  };

  // `unexpected_cap`: bytes of unreceived short messages above which the
  // process is congested. `spin`: how long a polling receiver spins before
  // it sleeps. `shutting_down` ends every wait (Cancelled).
  ReceiveSide(size_t unexpected_cap, std::chrono::microseconds spin,
              const std::atomic<bool>& shutting_down, Hooks hooks);
  ~ReceiveSide();

  // The process is known once it enrolled with its daemon, the progress
  // engine once the networks are open; both come before any mailbox.
  void SetProcess(Gid process) { process_ = process; }
  void AttachProgress(ProgressEngine& progress) { progress_ = &progress; }

  // --- threads ---
  void AddThread(Gid thread) {
    threads_.Insert(thread.thread_index(), std::make_unique<Mailbox>(thread, &completions_));
  }
  // A mailbox at a reserved index, never registered with the directory.
  Mailbox* AddInternal(uint32_t index);
  // The thread leaves: its waiting messages are dropped. False when it was
  // never enrolled or had left already.
  bool Leave(Gid thread);
  // Every mailbox leaves (the runtime goes away).
  void LeaveAll();
  // Wakes every receiver (they see the runtime shutting down).
  void WakeAll();
  // The mailbox of an enrolled thread that has not left, or nullptr.
  Mailbox* Find(Gid thread) const { return threads_.Find(thread.thread_index()); }
  // InvalidArgument for a gid that is not an enrolled thread of this
  // process (or a reserved one); FailedPrecondition once it has left.
  Result<Mailbox*> LocalMailbox(Gid self) const;

  // --- arrivals ---
  // Into a local thread's mailbox: Ok takes the reference in `slot`; on
  // error (no such thread, or it left) it is still the caller's.
  Status Deliver(buffers::SlotRef& slot);
  bool Congested() const {
    return unexpected_bytes_.load(std::memory_order_relaxed) > unexpected_cap_;
  }
  // Frames held elsewhere (pair order) count here too.
  std::atomic<size_t>& unexpected_bytes() { return unexpected_bytes_; }
  // A received message leaves the count; Release also drops its reference.
  void NoteReceived(detail::BufferSlot* slot);
  void Uncount(size_t bytes);
  void Release(detail::BufferSlot* slot);

  // --- receiving ---
  // Waits for a match; `blocking` false looks once (polling once if the
  // token is free).
  Result<Buffer> Receive(Gid self, Selector selector, Clock::time_point deadline, bool blocking);
  // Receives on a runtime-internal mailbox, or a thread's for its packed
  // reader (no hand-off from the poller). `check` (when set) runs whenever
  // the mailbox is signalled; its error ends the wait.
  Result<Buffer> ReceiveOn(Mailbox& mailbox, Selector selector, Clock::time_point deadline,
                           const std::function<Status()>& check);
  // Into the caller's memory; a long message may be bound to it while it
  // waits (its fragments then land in `out`).
  Result<MessageInfo> ReceiveInto(Gid self, Selector selector, std::span<std::byte> out,
                                  Clock::time_point deadline);
  Result<MessageInfo> Probe(Gid self, Selector selector, Clock::time_point deadline, bool blocking);

  // --- posted receives (RecvInto, requests: posted_receive.h) ---
  // Posts `post` on `mailbox` (Mailbox::Post); one with memory of its own
  // is announced to long messages waiting for memory.
  void Post(Mailbox& mailbox, PostedReceive& post);
  // Withdraws `post`: true when it took nothing (a long message landing in
  // its memory moves to library memory and stays queued for others), false
  // when it completed first (its outcome is the caller's).
  bool Withdraw(Mailbox& mailbox, PostedReceive& post);
  // A completed receive's message into its memory (`into`), its reference
  // dropped; the receive's error otherwise.
  Result<MessageInfo> FinishInto(PostedReceive& post);
  // A completed receive's message (its reference; nullptr when none), out
  // of the unexpected count.
  detail::BufferSlot* TakeSlot(PostedReceive& post);
  // Waits, as Recv does (polling for it, then sleeping), until `done()`,
  // which is asked whenever `mailbox` is signalled; `blocking` false asks
  // once after one poll round. When not done: DeadlineExceeded, TryAgain
  // (not blocking), Cancelled (shutting down), FailedPrecondition (the
  // mailbox's thread left). `lanes`: see AwaitSignal.
  Status Await(Mailbox& mailbox, Clock::time_point deadline, bool blocking,
               const std::function<bool()>& done, const std::atomic<uint32_t>* lanes = nullptr);
  // As Await, for requests of several threads (WaitAny, WaitAll): `done()`
  // is asked whenever one of them completes (RequestCompletions).
  Status AwaitAcross(Clock::time_point deadline, const std::function<bool()>& done);
  // A long send's `done` was just stored (posted receives tell their own,
  // PostedReceive::Complete): a waiter across threads may need to know.
  void NoteRequestDone() { completions_.NoteDone(); }
  // Every receive still posted completes with `status` (shutdown).
  void CompletePosted(const Status& status);
  // Until `mailbox`'s signal moves on from `seen`: polls for it when the
  // token is free (up to `poll_deadline`), else drains receive lanes
  // (wire/lanes.h) for the spin budget and sleeps on the mailbox (up to
  // `wait_deadline`) while the poller of the moment works. Also for a
  // sending thread waiting for acknowledgements (long_sender.cc).
  // `lanes`: the lanes to drain, a bit per lane, read each round (a waiter
  // for messages of other threads: the handler pool's lead); null, as for
  // every receiver, drains the lane of mailbox.gid().
  void AwaitSignal(Mailbox& mailbox, uint32_t seen, Clock::time_point poll_deadline,
                   Clock::time_point wait_deadline, const std::atomic<uint32_t>* lanes = nullptr);

 private:
  template <typename TryMatch>
  Status WaitFor(Gid self, Clock::time_point deadline, bool blocking, TryMatch&& try_match);
  template <typename TryMatch>
  Status WaitOn(Mailbox& mailbox, Clock::time_point deadline, bool blocking, TryMatch&& try_match,
                const std::atomic<uint32_t>* lanes = nullptr);
  // Polls (holding the token) until something is delivered to `mailbox`
  // or the deadline passes.
  void PollFor(Mailbox& mailbox, uint32_t seen, Clock::time_point deadline);

  Gid process_;
  const size_t unexpected_cap_;
  const std::chrono::microseconds spin_;
  const std::atomic<bool>& shutting_down_;
  const Hooks hooks_;
  ProgressEngine* progress_ = nullptr;
  RequestCompletions completions_;  // before threads_: their mailboxes point to it
  ThreadTable threads_;
  std::atomic<size_t> unexpected_bytes_{0};
};

}  // namespace tocl::runtime
