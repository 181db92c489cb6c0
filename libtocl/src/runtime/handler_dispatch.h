// Message handlers (tocl/handler.h): each registration is a standing
// receive posted on its thread's mailbox (posted_receive.h) whose claims
// make it ready; a pool of threads takes ready registrations and runs
// their calls.
//
// The pool (leader/followers): one idle thread, the lead, waits the way a
// blocked Recv does (ReceiveSide::Await on the dispatch's own mailbox:
// polling the networks while eager, then asleep), so a claim made by its
// own poll round costs it no wake-up. While another thread holds the poll
// token, the lead drains the receive lanes of the registrations' threads
// (lanes_), as a Recv on those threads would drain theirs. Other idle
// threads sleep on a condition variable. A claim (on the delivery path,
// under the mailbox's lock) only tells an idle thread: the lead, else a
// sleeping one. Threads
// are started by the pool itself: a thread that leaves for a call wakes
// the lead or a sleeper when more work is ready, and starts a new thread
// when no idle (or starting) one is left, up to kMaxHandlerThreads. So a
// claim always finds an idle thread, and calls of different
// registrations, and an unordered registration's calls, run at once. The
// delivery path starts a thread only when none is idle or starting below
// the bound, which happens only after starting one failed.
//
// Locks, in the order they are taken: register_mu_ ──> a Mailbox's ──> mu_ (Claimed runs
// under the mailbox's lock). Calls run with no lock held.
//
// Threading: every method from any thread; Claimed from the delivery path.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/mailbox.h"
#include "runtime/posted_receive.h"
#include "runtime/receive_side.h"
#include "tocl/handler.h"
#include "tocl/status.h"

namespace tocl::runtime {

class HandlerDispatch {
 public:
  // `shutting_down`: once set, no call starts.
  HandlerDispatch(ReceiveSide& receive, const std::atomic<bool>& shutting_down);
  // Stop(), if it did not run.
  ~HandlerDispatch();
  HandlerDispatch(const HandlerDispatch&) = delete;
  HandlerDispatch& operator=(const HandlerDispatch&) = delete;

  // Posts a standing receive for `selector` on `mailbox` (the thread
  // `thread`, checked by the caller) and returns its id. Messages already
  // queued there that it matches are claimed at once. FailedPrecondition
  // when the thread has left (since the caller's check), Unavailable once
  // stopping.
  Result<HandlerId> Register(Gid thread, Mailbox& mailbox, Selector selector,
                             const HandlerOptions& options, HandlerFunction function);
  // tocl/handler.h's CancelHandler. NotFound for an id that is not a
  // registration (never was, or cancelled already).
  Status Cancel(HandlerId id);
  // Whether the calling thread is in a call of one of this dispatch's
  // handlers (Shutdown refuses it). A call of another runtime's handler is
  // not one.
  bool InCall() const;

  // Shutdown: waits for the running calls (no new one starts: the runtime's
  // shutting_down flag is set and its receivers woken), withdraws every
  // registration (their unhandled messages stay queued) and joins the pool.
  void Stop();

 private:
  struct Registration;
  // Why Cancel may not wait: whether `target` waits, through calls waiting
  // in Cancel, for a call of `caller`'s. Under mu_.
  bool WaitsForLocked(const Registration* target, const Registration* caller) const;
  // The call the calling thread is running, if any: per dispatch, since
  // a handler of one runtime may call another runtime's CancelHandler.
  struct CurrentCall {
    const HandlerDispatch* dispatch = nullptr;
    Registration* registration = nullptr;
  };
  static thread_local CurrentCall current_call_;
  // The registration whose call the calling thread is running, if it is
  // one of this dispatch's; else null.
  Registration* Caller() const;

  void Claimed(Registration& registration);
  // lanes_ again, from the registrations left.
  void CountLanesLocked();
  bool RunnableLocked(const Registration& registration) const;
  void MakeReadyLocked(Registration& registration);
  // Somebody must take the ready work: the lead is told, else a sleeping
  // thread; false when neither is there.
  bool NotifyLocked();
  // Starts a pool thread, unless stopping or at kMaxHandlerThreads.
  void AddThreadLocked();
  void Work();
  // Runs one call of `registration` (its call is counted); with mu_
  // released meanwhile.
  void RunCall(Registration& registration, std::unique_lock<std::mutex>& lock);
  // Frees `registration` if it is retired and its last call has ended.
  void ReleaseRetiredLocked(Registration& registration, std::unique_lock<std::mutex>& lock);
  // The call itself, with the message `slot` (its reference taken); no
  // lock held.
  void Call(Registration& registration, detail::BufferSlot* slot);

  ReceiveSide& receive_;
  const std::atomic<bool>& shutting_down_;
  // The lead waits on it (its signal is the dispatch's bell).
  Mailbox bell_{Gid()};

  // Held by Register across its table entry and its post, and by Stop:
  // taken before a mailbox's lock.
  std::mutex register_mu_;
  mutable std::mutex mu_;
  // A registration lives while a call of it may run: in registrations_
  // until cancelled, then held by its Cancel (or Stop) while that waits for
  // the running calls, or, when Cancel cannot wait (from one of the calls
  // it would wait for), in retired_ until its last call ends. A call
  // itself holds no reference: nothing per message.
  std::map<HandlerId, std::shared_ptr<Registration>> registrations_;  // guarded by mu_
  std::vector<std::shared_ptr<Registration>> retired_;                // guarded by mu_
  std::deque<Registration*> ready_;                                   // guarded by mu_
  // ready_ is not empty (or stopping): the lead's wake-up test, read
  // without mu_.
  std::atomic<bool> work_{false};
  // A bit per receive lane (wire/lanes.h) of a registration's thread: the
  // lanes the lead drains while another thread polls. Written under mu_.
  std::atomic<uint32_t> lanes_{0};
  HandlerId next_id_ = 1;                // guarded by mu_
  std::vector<std::thread> pool_;        // guarded by mu_
  bool lead_waiting_ = false;            // guarded by mu_
  size_t sleeping_ = 0;                  // guarded by mu_
  size_t starting_ = 0;                  // started, not yet in Work's loop; guarded by mu_
  bool stopping_ = false;                // guarded by mu_
  std::condition_variable idle_cv_;      // followers sleep here
  std::condition_variable finished_cv_;  // Cancel and Stop wait for calls here
};

}  // namespace tocl::runtime
