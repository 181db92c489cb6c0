// Progress: who polls the networks, and when a process sleeps.
//
// One thread at a time holds the poll token and polls: a thread waiting in
// Recv takes it and polls for its own message (no hand-off between threads
// on the fast path); it spins for RuntimeOptions::spin, then sleeps in the
// reactor (epoll) until a peer rings (shm bell, tcp data) or its deadline.
// Other waiting receivers drain their own receive lanes (PollLane, no
// token needed) for a while, then sleep on their mailboxes; the poller
// drains the lanes nobody else does and hands them their messages. The
// progress thread takes the token when nobody has used it for a while
// (Timing::idle_hand_over), so that unexpected messages, tcp connections
// and queued sends still move while every thread computes, or at once when
// a receiver stops polling to sleep on its mailbox
// (ReleaseToProgressThread); it sleeps in the reactor: an idle process
// costs no CPU.
//
// Threading: TryAcquire/Release from any thread; PollOnce/Sleep only by the
// token holder.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/epoll_reactor.h"
#include "runtime/mailbox.h"
#include "subsystem/subsystem.h"

namespace tocl::runtime {

class ProgressEngine {
 public:
  // When the progress thread takes the token on its own.
  struct Timing {
    // How long the token must lie unused before the progress thread takes
    // it: long enough that a thread in a send/recv loop never meets it.
    std::chrono::milliseconds idle_hand_over{2};
    // How often the progress thread looks at the token while someone holds
    // it.
    std::chrono::milliseconds progress_check{10};
  };

  // `flush_queued` retries sends waiting in the send queues (called by the
  // poller; returns true when some are still waiting).
  ProgressEngine(EpollReactor& reactor, std::function<bool()> flush_queued);
  ProgressEngine(EpollReactor& reactor, std::function<bool()> flush_queued, Timing timing);
  ~ProgressEngine();

  void AddSubsystem(subsystem::Subsystem* subsystem) { subsystems_.push_back(subsystem); }
  // Starts the progress thread (after every subsystem was added).
  void Start();
  void Stop();

  bool TryAcquire() { return !token_.exchange(true, std::memory_order_acquire); }
  void Release();
  // Release by a thread that stops polling to sleep elsewhere (an idle
  // receiver on its mailbox): the progress thread takes the token now, not
  // after Timing::idle_hand_over, so that an arrival still wakes a sleeping
  // receiver at once (senders ring only a poller that sleeps in the
  // reactor; nobody would be listening in between).
  void ReleaseToProgressThread();

  // One non-blocking round: every subsystem, the reactor, the send queues.
  // Returns the number of events.
  int PollOnce();
  // One round if the token is free (a thread that wants progress without
  // waiting for it); false when someone else polls.
  bool TryPollOnce() {
    if (!TryAcquire()) return false;
    PollOnce();
    Release();
    return true;
  }
  // Makes progress (polling when the token is free, else pausing briefly)
  // until `done()` or `deadline`: whether it was done. For a flushing
  // shutdown, not for a message's path.
  bool PollUntil(const std::function<bool()>& done, std::chrono::steady_clock::time_point deadline);
  // Waits (yielding) up to `timeout` for the token: whether it got it.
  bool AcquireWithin(std::chrono::steady_clock::duration timeout);
  // Waits until `deadline` for the token as a token waiter (the holder
  // hands it over when it lets go, a sleeping one at once), woken through
  // `waiter`, a mailbox of the caller's that nobody delivers to. False at
  // the deadline or once the engine stops.
  bool AcquireFor(Mailbox& waiter, std::chrono::steady_clock::time_point deadline);
  // Subsystem::DrainFrom(process) on every subsystem; by the token holder.
  // True when nothing from `process` is left in any of them.
  bool DrainFrom(Gid process) {
    bool empty = true;
    for (auto* subsystem : subsystems_) empty = subsystem->DrainFrom(process) && empty;
    return empty;
  }
  // Drains receive lane `lane` (wire/lanes.h) of every network unless
  // another thread does: a receiver of that lane polls for itself while
  // another thread holds the token. Any thread; no token needed.
  int PollLane(uint32_t lane) {
    int delivered = 0;
    for (auto* subsystem : subsystems_) delivered += subsystem->PollLane(lane);
    return delivered;
  }
  // The token holder sleeps in the reactor (AddTokenWaiter wakes it).
  bool HolderAsleep() const { return holder_sleeping_.load(std::memory_order_seq_cst); }

  // Sleeps in the reactor until woken or `deadline` (unless something is
  // already there). A receiver that polls for its own message passes its
  // mailbox and the signal it last saw: a delivery to it since, or during
  // the sleep, ends the sleep at once (Mailbox::SetPollerAsleep).
  void Sleep(std::chrono::steady_clock::time_point deadline, Mailbox* receiver = nullptr,
             uint32_t seen = 0);

  // A receiver without the token waits for its mailbox; it registers here so
  // that the token holder hands the token over when it leaves.
  void AddTokenWaiter(Mailbox* mailbox);
  void RemoveTokenWaiter(Mailbox* mailbox);

  // Sends are waiting in a queue: the poller retries them. With `first`
  // (a queue started waiting) a holder asleep is woken: it may sleep where
  // the peer's "room again" does not reach it (the shm futex, not hearing
  // its bell), and a frame queued meanwhile (the first one over a channel
  // the peer has not adopted yet) would wait for its deadline, up to a
  // second. Frames queued behind one that waits wake nobody: the holder
  // already sleeps at most 10 ms and in epoll, where acknowledgements and
  // bells reach it (a wake per frame cost a tcp stream whose window is
  // full a quarter of its bandwidth). seq_cst: Dekker with Sleep, which
  // stores holder_sleeping_ and then loads the hint.
  void NoteQueued(bool first = true) {
    queued_hint_.store(true, std::memory_order_seq_cst);
    if (first && holder_sleeping_.load(std::memory_order_seq_cst)) reactor_.Wake();
  }
  // A thread waits for something only a bell announces (a shm receiver
  // providing buffers again): the poller sleeps in epoll, not on the shm
  // futex, while any such thread waits. Calls nest.
  void ListenForBells(bool on) { bell_listeners_.fetch_add(on ? 1 : -1); }

 private:
  void ThreadLoop();
  void SleepUntil(std::chrono::steady_clock::time_point until, bool queued);
  void HousekeepingIfDue(std::chrono::steady_clock::time_point now);

  EpollReactor& reactor_;
  std::function<bool()> flush_queued_;
  const Timing timing_;
  std::vector<subsystem::Subsystem*> subsystems_;

  std::atomic<bool> token_{false};
  std::atomic<uint64_t> releases_{0};  // written by the token holder only
  std::atomic<bool> queued_hint_{false};
  std::atomic<int> bell_listeners_{0};

  std::mutex waiters_mu_;
  std::vector<Mailbox*> waiters_;  // guarded by waiters_mu_
  std::atomic<int> waiter_count_{0};
  // The token holder sleeps in Sleep(): token waiters must wake it.
  std::atomic<bool> holder_sleeping_{false};

  // Token holder only.
  uint32_t work_ = 0;  // rounds and deliveries since the clock was read
  std::chrono::steady_clock::time_point next_reactor_poll_{};
  std::chrono::steady_clock::time_point next_housekeeping_{};

  std::atomic<bool> stop_{false};
  // Set by ReleaseToProgressThread: the progress thread takes the token
  // without waiting for it to lie idle.
  std::atomic<bool> handed_over_{false};
  std::atomic<uint32_t> thread_signal_{0};
  std::thread thread_;
};

}  // namespace tocl::runtime
