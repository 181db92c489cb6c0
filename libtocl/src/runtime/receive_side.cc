#include "runtime/receive_side.h"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>
#include <utility>

#include "buffers/buffer_pool.h"
#include "buffers/large_slot.h"
#include "runtime/internal_threads.h"
#include "wire/frame.h"
#include "wire/lanes.h"

namespace tocl::runtime {

namespace {

// How long a receiver counts as eager (it polls for itself) after it last
// found a message; an idle one sleeps on its mailbox.
constexpr auto kEagerWait = std::chrono::milliseconds(100);

// The hand-off: a thread in Receive that polls for itself says here what it
// waits for. When its own poll round delivers a match while nothing is
// queued for it, Deliver puts the message here instead of in the mailbox:
// no lock, no queue, no wake-up (the same thread is on both sides).
struct Expecting {
  Mailbox* mailbox = nullptr;
  Selector selector;
  detail::BufferSlot* got = nullptr;  // one reference
};
thread_local Expecting expecting;

// Says what this thread waits for while it lives. A receive returns right
// after a look that empties `got`, so nothing is ever left in it. Should a
// receive ever nest in another on the same thread, the outer's expectation
// comes back whole: a message already handed to it is kept, not dropped.
class ExpectingScope {
 public:
  ExpectingScope(Mailbox* mailbox, const Selector& selector)
      : outer_(std::exchange(expecting, Expecting{mailbox, selector, nullptr})) {}
  ~ExpectingScope() {
    assert(expecting.got == nullptr);
    expecting = outer_;
  }
  ExpectingScope(const ExpectingScope&) = delete;
  ExpectingScope& operator=(const ExpectingScope&) = delete;

 private:
  const Expecting outer_;
};

}  // namespace

ReceiveSide::ReceiveSide(size_t unexpected_cap, std::chrono::microseconds spin,
                         const std::atomic<bool>& shutting_down, Hooks hooks)
    : unexpected_cap_(unexpected_cap),
      spin_(spin),
      shutting_down_(shutting_down),
      hooks_(std::move(hooks)) {}

ReceiveSide::~ReceiveSide() {
  LeaveAll();
}

Mailbox* ReceiveSide::AddInternal(uint32_t index) {
  auto mailbox = std::make_unique<Mailbox>(Gid::Thread(process_, index), &completions_);
  Mailbox* raw = mailbox.get();
  threads_.Insert(index, std::move(mailbox));
  return raw;
}

bool ReceiveSide::Leave(Gid thread) {
  Mailbox* mailbox = threads_.Find(thread.thread_index());
  if (mailbox == nullptr || mailbox->left()) return false;
  size_t dropped_bytes = 0;
  mailbox->Leave(&dropped_bytes);
  unexpected_bytes_.fetch_sub(dropped_bytes, std::memory_order_relaxed);
  return true;
}

void ReceiveSide::LeaveAll() {
  threads_.ForEach([](Mailbox& mailbox) { mailbox.Leave(); });
}

void ReceiveSide::WakeAll() {
  threads_.ForEach([](Mailbox& mailbox) { mailbox.Wake(); });
  completions_.mailbox().Wake();
}

Status ReceiveSide::Deliver(buffers::SlotRef& slot) {
  const Gid to = Gid::FromRaw(slot->header().destination);
  Mailbox* mailbox = threads_.Find(to.thread_index());
  if (mailbox == nullptr) return NotFound(fmt::format("no thread {}", to.ToString()));
  slot->set_state(BufferState::kIdle);
  if (expecting.mailbox == mailbox && expecting.got == nullptr && !buffers::IsLarge(slot.get()) &&
      mailbox->empty() && !mailbox->HasPosted() && !mailbox->left() &&
      expecting.selector.Matches(Gid::FromRaw(slot->header().source), slot->header().tag,
                                 slot->header().flags)) {
    // Nothing queued is older (a long message still arriving is queued and
    // keeps its sender's later ones behind it), and no receive posted
    // before this one waits for it: taking it now keeps every pair's order
    // and the posted receives' turn. Never unexpected, so never counted.
    expecting.got = slot.release();
    return Status::Ok();
  }
  // Mailbox::Deliver takes the reference only when it returns true. It
  // counts the message as unexpected only when it queues it: one a posted
  // receive had asked for never was.
  if (!mailbox->Deliver(slot.get(), &unexpected_bytes_)) {
    return FailedPrecondition(fmt::format("thread {} has left", to.ToString()));
  }
  (void)slot.release();  // the mailbox's now
  return Status::Ok();
}

Result<Mailbox*> ReceiveSide::LocalMailbox(Gid self) const {
  if (!self.is_thread() || self.process() != process_) {
    return InvalidArgument(fmt::format("{} is not a thread of this process ({})", self.ToString(),
                                       process_.ToString()));
  }
  if (IsInternalThread(self)) return ReservedThread(self);
  Mailbox* mailbox = threads_.Find(self.thread_index());
  if (mailbox == nullptr) {
    return InvalidArgument(fmt::format("thread {} was never enrolled", self.ToString()));
  }
  if (mailbox->left())
    return FailedPrecondition(fmt::format("thread {} has left", self.ToString()));
  return mailbox;
}

void ReceiveSide::AwaitSignal(Mailbox& mailbox, uint32_t seen, Clock::time_point poll_deadline,
                              Clock::time_point wait_deadline, const std::atomic<uint32_t>* lanes) {
  if (progress_->TryAcquire()) {
    PollFor(mailbox, seen, poll_deadline);
    progress_->Release();
    return;
  }
  // Someone else polls. For the spin budget, drain our own lane (or
  // `lanes`: the poller drains the lanes nobody else does, and hands us
  // what came by other ways), yielding the CPU now and then (a sender or
  // the poller may need it), and take the token if it comes free; then
  // sleep on the mailbox. A token waiter is handed the token when the holder lets go; a
  // holder asleep in the reactor lets go at once (while it sleeps our
  // senders would ring its bell for every message).
  const uint32_t lane = wire::LaneOf(mailbox.gid());
  bool waiting_for_token = false;
  auto poll_with_token = [&] {
    if (waiting_for_token) progress_->RemoveTokenWaiter(&mailbox);
    PollFor(mailbox, seen, poll_deadline);
    progress_->Release();
  };
  Clock::time_point spin_until = Clock::time_point::min();
  for (uint32_t round = 1; spin_.count() != 0; ++round) {
    if (!waiting_for_token && progress_->HolderAsleep()) {
      progress_->AddTokenWaiter(&mailbox);
      waiting_for_token = true;
    }
    if (progress_->TryAcquire()) return poll_with_token();
    if (lanes == nullptr) {
      progress_->PollLane(lane);
    } else {
      for (uint32_t mask = lanes->load(std::memory_order_relaxed); mask != 0; mask &= mask - 1) {
        progress_->PollLane(static_cast<uint32_t>(std::countr_zero(mask)));
      }
    }
    if (mailbox.signal() != seen || shutting_down_.load(std::memory_order_relaxed)) {
      if (waiting_for_token) progress_->RemoveTokenWaiter(&mailbox);
      return;
    }
    if (round % 4 == 0) sched_yield();
    if (round % 64 != 0) continue;
    const auto now = Clock::now();
    if (spin_until == Clock::time_point::min()) spin_until = std::min(now + spin_, wait_deadline);
    if (now >= spin_until) break;
  }
  if (!waiting_for_token) {
    progress_->AddTokenWaiter(&mailbox);
    waiting_for_token = true;
  }
  if (progress_->TryAcquire()) return poll_with_token();
  mailbox.Wait(seen, wait_deadline);
  progress_->RemoveTokenWaiter(&mailbox);
}

void ReceiveSide::PollFor(Mailbox& mailbox, uint32_t seen, Clock::time_point deadline) {
  // Reading the clock costs more than a round of polling shm (~10 ns): look
  // at it every 128th round only, and not at all when the message comes
  // sooner (the spin starts at the first look).
  Clock::time_point spin_until = Clock::time_point::min();
  for (uint32_t round = 1;; ++round) {
    progress_->PollOnce();
    if (mailbox.signal() != seen || expecting.got != nullptr ||
        shutting_down_.load(std::memory_order_relaxed)) {
      return;
    }
    if (round % 128 != 0 && spin_.count() != 0) continue;
    const auto now = Clock::now();
    if (now >= deadline) return;
    if (spin_until == Clock::time_point::min()) spin_until = now + spin_;
    if (now >= spin_until) {
      progress_->Sleep(deadline, &mailbox, seen);
      progress_->PollOnce();
      return;
    }
  }
}

template <typename TryMatch>
Status ReceiveSide::WaitFor(Gid self, Clock::time_point deadline, bool blocking,
                            TryMatch&& try_match) {
  TOCL_ASSIGN_OR_RETURN(Mailbox * mailbox, LocalMailbox(self));
  return WaitOn(*mailbox, deadline, blocking, std::forward<TryMatch>(try_match));
}

template <typename TryMatch>
Status ReceiveSide::WaitOn(Mailbox& the_mailbox, Clock::time_point deadline, bool blocking,
                           TryMatch&& try_match, const std::atomic<uint32_t>* lanes) {
  Mailbox* mailbox = &the_mailbox;
  const Gid self = mailbox->gid();
  // Eager: polls for itself, spinning first, for kEagerWait; idle after
  // that (see below). A message already there costs no clock read.
  Clock::time_point eager_until = Clock::time_point::min();
  bool eager = true;
  for (;;) {
    // Read before looking: a delivery after the look moves it on, so the
    // wait below does not sleep past a message already there.
    const uint32_t seen = mailbox->signal();
    if (try_match(*mailbox)) return Status::Ok();
    if (mailbox->left())
      return FailedPrecondition(fmt::format("thread {} has left", self.ToString()));
    if (shutting_down_.load(std::memory_order_relaxed)) {
      return Status(StatusCode::kCancelled, "the runtime is shutting down");
    }
    if (!blocking) {
      if (progress_->TryPollOnce() && try_match(*mailbox)) return Status::Ok();
      return Status(StatusCode::kTryAgain, "no matching message");
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      return DeadlineExceeded(
          fmt::format("no matching message for {} arrived in time", self.ToString()));
    }
    if (eager_until == Clock::time_point::min()) eager_until = now + kEagerWait;
    if (eager && now >= eager_until) eager = false;
    if (!eager) {
      // An idle receiver (it waited a while and nothing came) does not
      // take the poll token to spin and sleep with it: with many threads
      // blocked in Recv that would pass the token around and keep the
      // busy ones from polling for themselves. It looks once, then sleeps
      // on its mailbox; the poller of the moment (a busy receiver, else the
      // progress thread) hands it its messages.
      // Whoever polls last before it sleeps hands the token to the progress
      // thread: with nobody in the reactor, no sender rings and an arrival
      // would wait for the progress thread's next look.
      if (progress_->TryAcquire()) {
        progress_->PollOnce();
        progress_->ReleaseToProgressThread();
        if (try_match(*mailbox)) return Status::Ok();
      }
      mailbox->Wait(seen, std::min(deadline, Clock::now() + std::chrono::seconds(1)));
      continue;
    }
    AwaitSignal(*mailbox, seen, deadline, std::min(deadline, eager_until), lanes);
  }
}

Result<Buffer> ReceiveSide::Receive(Gid self, Selector selector, Clock::time_point deadline,
                                    bool blocking) {
  TOCL_ASSIGN_OR_RETURN(Mailbox * mailbox, LocalMailbox(self));
  detail::BufferSlot* slot = nullptr;
  bool handed = false;
  {
    ExpectingScope scope(mailbox, selector);
    TOCL_RETURN_IF_ERROR(WaitOn(*mailbox, deadline, blocking, [&](Mailbox& box) {
      slot = std::exchange(expecting.got, nullptr);
      handed = slot != nullptr;
      if (!handed) slot = box.Take(selector);
      return slot != nullptr;
    }));
  }
  if (!handed) NoteReceived(slot);
  return Buffer(slot);
}

Result<Buffer> ReceiveSide::ReceiveOn(Mailbox& mailbox, Selector selector,
                                      Clock::time_point deadline,
                                      const std::function<Status()>& check) {
  detail::BufferSlot* slot = nullptr;
  Status failed;
  TOCL_RETURN_IF_ERROR(WaitOn(mailbox, deadline, true, [&](Mailbox& box) {
    // A message that is there wins over a failure seen since it came (a
    // reply sent just before its process exited).
    slot = box.Take(selector);
    if (slot != nullptr) return true;
    if (check) {
      failed = check();
      if (!failed.ok()) return true;
    }
    return false;
  }));
  if (!failed.ok()) return failed;
  NoteReceived(slot);
  return Buffer(slot);
}

void ReceiveSide::NoteReceived(detail::BufferSlot* slot) {
  Uncount(Mailbox::SlotBytes(slot));
}

void ReceiveSide::Uncount(size_t bytes) {
  const size_t before = unexpected_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  if (before > unexpected_cap_ && before - bytes <= unexpected_cap_) {
    // No longer congested: a sleeping poller must provide buffers and read
    // the paused connections again.
    hooks_.wake_poller();
  }
}

void ReceiveSide::Release(detail::BufferSlot* slot) {
  NoteReceived(slot);
  slot->pool->Unref(slot);
}

Result<MessageInfo> ReceiveSide::ReceiveInto(Gid self, Selector selector, std::span<std::byte> out,
                                             Clock::time_point deadline) {
  TOCL_ASSIGN_OR_RETURN(Mailbox * mailbox, LocalMailbox(self));
  PostedReceive post;
  post.selector = selector;
  post.into = true;
  post.out = out;
  Post(*mailbox, post);
  Status waited = WaitOn(*mailbox, deadline, true,
                         [&](Mailbox&) { return post.done.load(std::memory_order_acquire); });
  // Whatever WaitOn said (the thread may have left meanwhile), `post` must
  // be withdrawn before it goes out of scope; it may have completed since.
  if (!waited.ok() && Withdraw(*mailbox, post)) return waited;
  return FinishInto(post);
}

void ReceiveSide::Post(Mailbox& mailbox, PostedReceive& post) {
  mailbox.Post(&post);
  // Long starts waiting for memory may take this buffer.
  if (post.into && !post.done.load(std::memory_order_acquire)) hooks_.receive_posted();
}

bool ReceiveSide::Withdraw(Mailbox& mailbox, PostedReceive& post) {
  switch (mailbox.Withdraw(&post)) {
    case Mailbox::Withdrawal::kWithdrawn:
      return true;
    case Mailbox::Withdrawal::kDone:
      return false;
    case Mailbox::Withdrawal::kBound:
      return hooks_.unbind_posted(post);
  }
  return false;
}

Result<MessageInfo> ReceiveSide::FinishInto(PostedReceive& post) {
  if (post.slot == nullptr) {
    TOCL_RETURN_IF_ERROR(post.status);
    return post.info;  // bound: it landed in `out`
  }
  detail::BufferSlot* slot = TakeSlot(post);
  std::memcpy(post.out.data(), slot->payload(), post.info.size);
  slot->pool->Unref(slot);
  return post.info;
}

detail::BufferSlot* ReceiveSide::TakeSlot(PostedReceive& post) {
  detail::BufferSlot* slot = std::exchange(post.slot, nullptr);
  if (slot != nullptr && post.counted) NoteReceived(slot);
  return slot;
}

Status ReceiveSide::Await(Mailbox& mailbox, Clock::time_point deadline, bool blocking,
                          const std::function<bool()>& done, const std::atomic<uint32_t>* lanes) {
  return WaitOn(
      mailbox, deadline, blocking, [&](Mailbox&) { return done(); }, lanes);
}

Status ReceiveSide::AwaitAcross(Clock::time_point deadline, const std::function<bool()>& done) {
  completions_.BeginCrossWait();
  Status waited = WaitOn(completions_.mailbox(), deadline, true, [&](Mailbox&) { return done(); });
  completions_.EndCrossWait();
  if (waited.code() == StatusCode::kDeadlineExceeded) {
    return DeadlineExceeded("no request completed in time");
  }
  return waited;
}

void ReceiveSide::CompletePosted(const Status& status) {
  threads_.ForEach([&](Mailbox& mailbox) { mailbox.CompletePosted(status); });
}

Result<MessageInfo> ReceiveSide::Probe(Gid self, Selector selector, Clock::time_point deadline,
                                       bool blocking) {
  MessageInfo info;
  TOCL_RETURN_IF_ERROR(WaitFor(self, deadline, blocking,
                               [&](Mailbox& mailbox) { return mailbox.Peek(selector, info); }));
  return info;
}

}  // namespace tocl::runtime
