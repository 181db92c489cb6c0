#include "runtime/progress_engine.h"

#include <algorithm>
#include <climits>

#include "core/posix.h"

namespace tocl::runtime {

namespace {

constexpr auto kHousekeepingPeriod = std::chrono::seconds(1);
// How often a polling thread looks at the fds while only shm is in use:
// what they announce (a new tcp connection, a peer's bell while it waits
// for buffers) waits at most this long.
constexpr auto kReactorPollPeriod = std::chrono::microseconds(50);
constexpr uint32_t kWorkPerClockRead = 256;

}  // namespace

ProgressEngine::ProgressEngine(EpollReactor& reactor, std::function<bool()> flush_queued)
    : ProgressEngine(reactor, std::move(flush_queued), Timing{}) {}

ProgressEngine::ProgressEngine(EpollReactor& reactor, std::function<bool()> flush_queued,
                               Timing timing)
    : reactor_(reactor), flush_queued_(std::move(flush_queued)), timing_(timing) {}

ProgressEngine::~ProgressEngine() {
  Stop();
}

void ProgressEngine::Start() {
  thread_ = std::thread([this] { ThreadLoop(); });
}

void ProgressEngine::Stop() {
  if (stop_.exchange(true)) return;
  thread_signal_.fetch_add(1);
  FutexWakeAll(thread_signal_, FutexScope::kPrivate);
  reactor_.Wake();
  if (thread_.joinable()) thread_.join();
}

void ProgressEngine::Release() {
  // A count, not a time: reading the clock here would cost the fast path
  // a clock read per message; the progress thread times the count instead.
  releases_.store(releases_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  token_.store(false, std::memory_order_seq_cst);
  if (waiter_count_.load(std::memory_order_seq_cst) == 0) return;
  std::lock_guard lock(waiters_mu_);
  if (!waiters_.empty()) waiters_.front()->Wake();
}

void ProgressEngine::ReleaseToProgressThread() {
  Release();
  // A token waiter was woken by Release and takes it itself.
  if (waiter_count_.load(std::memory_order_seq_cst) != 0) return;
  handed_over_.store(true, std::memory_order_seq_cst);
  thread_signal_.fetch_add(1, std::memory_order_seq_cst);
  FutexWakeAll(thread_signal_, FutexScope::kPrivate);
}

void ProgressEngine::AddTokenWaiter(Mailbox* mailbox) {
  {
    std::lock_guard lock(waiters_mu_);
    waiters_.push_back(mailbox);
    waiter_count_.fetch_add(1, std::memory_order_seq_cst);
  }
  // A holder asleep (the progress thread, or a receiver with a long
  // deadline) must let go; one that polls sees waiter_count_ soon enough.
  if (holder_sleeping_.load(std::memory_order_seq_cst)) reactor_.Wake();
}

void ProgressEngine::RemoveTokenWaiter(Mailbox* mailbox) {
  std::lock_guard lock(waiters_mu_);
  auto it = std::find(waiters_.begin(), waiters_.end(), mailbox);
  if (it != waiters_.end()) {
    waiters_.erase(it);
    waiter_count_.fetch_sub(1, std::memory_order_relaxed);
  }
}

int ProgressEngine::PollOnce() {
  int events = 0;
  for (auto* subsystem : subsystems_) events += subsystem->Poll();
  // epoll_wait costs a system call, as long as a shm message takes to
  // arrive: every round only while a subsystem waits for fd events;
  // otherwise by time (new connections, bells from peers, wake-ups from
  // inside the process). The clock is read after every kWorkPerClockRead
  // units of work, a round or a delivered message each: an empty shm round
  // (~10 ns) reads it every 256th time, a round that delivered a burst of
  // tcp frames (~1 ms under load) at once, so that a handshake answer on
  // an outbound socket never waits for 256 such rounds.
  bool each_round = false;
  for (auto* subsystem : subsystems_) each_round = each_round || subsystem->WantsReactorEachRound();
  if (each_round) {
    events += reactor_.Wait(0);
  }
  work_ += 1 + static_cast<uint32_t>(events);
  if (work_ >= kWorkPerClockRead) {
    work_ = 0;
    const auto now = std::chrono::steady_clock::now();
    if (!each_round && now >= next_reactor_poll_) {
      next_reactor_poll_ = now + kReactorPollPeriod;
      events += reactor_.Wait(0);
    }
    HousekeepingIfDue(now);
  }
  if (queued_hint_.load(std::memory_order_acquire)) {
    queued_hint_.store(false, std::memory_order_relaxed);
    if (flush_queued_()) queued_hint_.store(true, std::memory_order_relaxed);
  }
  return events;
}

void ProgressEngine::HousekeepingIfDue(std::chrono::steady_clock::time_point now) {
  if (now < next_housekeeping_) return;
  next_housekeeping_ = now + kHousekeepingPeriod;
  for (auto* subsystem : subsystems_) subsystem->Housekeeping();
  queued_hint_.store(true, std::memory_order_relaxed);
}

void ProgressEngine::Sleep(std::chrono::steady_clock::time_point deadline, Mailbox* receiver,
                           uint32_t seen) {
  holder_sleeping_.store(true, std::memory_order_seq_cst);
  if (receiver != nullptr) receiver->SetPollerAsleep(&reactor_);
  // A waiter that registered (or a message that came) before the flags were
  // set did not wake us: do not sleep past it.
  if (waiter_count_.load(std::memory_order_seq_cst) == 0 &&
      (receiver == nullptr || receiver->signal() == seen)) {
    // Housekeeping runs at least once a second; sends still queued are
    // retried at least every 10 ms.
    const auto now = std::chrono::steady_clock::now();
    auto until = std::min(
        deadline, next_housekeeping_ > now ? next_housekeeping_ : now + kHousekeepingPeriod);
    const bool queued = queued_hint_.load(std::memory_order_seq_cst);
    if (queued) until = std::min(until, now + std::chrono::milliseconds(10));
    // A subsystem's own timers (a connection to try again).
    for (auto* subsystem : subsystems_) until = std::min(until, subsystem->WakeBy());
    SleepUntil(until, queued);
  }
  if (receiver != nullptr) receiver->SetPollerAsleep(nullptr);
  holder_sleeping_.store(false, std::memory_order_relaxed);
  HousekeepingIfDue(std::chrono::steady_clock::now());
}

void ProgressEngine::SleepUntil(std::chrono::steady_clock::time_point until, bool queued) {
  // Only one subsystem (its fds are its own business) and no queued send
  // waiting for a peer's bell: its own sleep is cheaper.
  if (subsystems_.size() == 1 && !queued && bell_listeners_.load(std::memory_order_relaxed) == 0 &&
      subsystems_.front()->SleepAlone(until)) {
    return;
  }
  size_t prepared = 0;
  bool may_sleep = true;
  for (; prepared < subsystems_.size(); ++prepared) {
    if (!subsystems_[prepared]->PrepareToSleep()) {
      may_sleep = false;
      ++prepared;
      break;
    }
  }
  if (may_sleep) {
    const auto ms =
        std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    reactor_.Wait(static_cast<int>(std::clamp<int64_t>(ms.count(), 0, INT_MAX)));
  }
  for (size_t i = 0; i < prepared; ++i) subsystems_[i]->FinishSleep();
}

void ProgressEngine::ThreadLoop() {
  // The token is idle when nobody released it since `unchanged_since`.
  uint64_t seen_releases = releases_.load(std::memory_order_relaxed);
  auto unchanged_since = std::chrono::steady_clock::now();
  while (!stop_.load(std::memory_order_acquire)) {
    const uint32_t seen = thread_signal_.load(std::memory_order_acquire);
    const auto now = std::chrono::steady_clock::now();
    if (const uint64_t releases = releases_.load(std::memory_order_relaxed);
        releases != seen_releases) {
      seen_releases = releases;
      unchanged_since = now;
    }
    const bool idle = now - unchanged_since >= timing_.idle_hand_over;
    // A hand-over is kept until the token is ours: a thread that took it
    // in between for one round (a non-blocking receive, a sender waiting
    // for room) may let it go with a plain Release.
    const bool handed = handed_over_.load(std::memory_order_acquire);
    if ((idle || handed) && waiter_count_.load() == 0 && TryAcquire()) {
      handed_over_.store(false, std::memory_order_relaxed);
      while (!stop_.load(std::memory_order_acquire) && waiter_count_.load() == 0) {
        PollOnce();
        Sleep(std::chrono::steady_clock::now() + kHousekeepingPeriod);
      }
      Release();
      // Do not take it straight back from the receiver we handed it to.
      seen_releases = releases_.load(std::memory_order_relaxed);
      unchanged_since = std::chrono::steady_clock::now();
      continue;
    }
    auto wait =
        idle ? timing_.progress_check : timing_.idle_hand_over + std::chrono::milliseconds(1);
    FutexWait(thread_signal_, seen, std::chrono::steady_clock::now() + wait, FutexScope::kPrivate);
  }
}

bool ProgressEngine::PollUntil(const std::function<bool()>& done,
                               std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (!TryPollOnce()) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

bool ProgressEngine::AcquireWithin(std::chrono::steady_clock::duration timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (TryAcquire()) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::yield();
  }
}

bool ProgressEngine::AcquireFor(Mailbox& waiter, std::chrono::steady_clock::time_point deadline) {
  if (TryAcquire()) return true;
  AddTokenWaiter(&waiter);
  bool acquired = false;
  while (!stop_.load(std::memory_order_acquire)) {
    // Read before trying: a Release after the try bumps it, so the wait
    // below does not sleep past it.
    const uint32_t seen = waiter.signal();
    if (TryAcquire()) {
      acquired = true;
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    // Release wakes only the first waiter; should that one not take the
    // token, the bound makes us look again soon.
    waiter.Wait(seen, std::min(deadline, now + std::chrono::milliseconds(1)));
  }
  RemoveTokenWaiter(&waiter);
  return acquired;
}

}  // namespace tocl::runtime
