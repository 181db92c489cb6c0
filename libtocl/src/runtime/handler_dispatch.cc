#include "runtime/handler_dispatch.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <system_error>
#include <utility>

#include "buffers/buffer_pool.h"
#include "core/logger.h"
#include "wire/lanes.h"

namespace tocl::runtime {

struct HandlerDispatch::Registration final : ClaimSink {
  explicit Registration(HandlerDispatch& owner) : dispatch(owner) {}
  void Claimed() override { dispatch.Claimed(*this); }

  HandlerDispatch& dispatch;
  HandlerId id = 0;
  Gid thread;
  Mailbox* mailbox = nullptr;
  HandlerFunction function;
  uint32_t max_calls = 1;  // 1 when ordered
  PostedReceive post;      // standing (post.standing == this)

  // Guarded by dispatch.mu_.
  size_t claimed = 0;    // claims no call has taken yet
  uint32_t running = 0;  // calls counted (between taking one and its end)
  bool ready = false;    // in ready_
  bool cancelled = false;
  // Registrations that calls of this one wait for in Cancel (one entry
  // per waiting call): the edges Cancel's deadlock check follows.
  std::vector<const Registration*> waiting_for;
};

thread_local HandlerDispatch::CurrentCall HandlerDispatch::current_call_;

HandlerDispatch::HandlerDispatch(ReceiveSide& receive, const std::atomic<bool>& shutting_down)
    : receive_(receive), shutting_down_(shutting_down) {}

HandlerDispatch::~HandlerDispatch() {
  Stop();
}

bool HandlerDispatch::InCall() const {
  return current_call_.dispatch == this;
}

HandlerDispatch::Registration* HandlerDispatch::Caller() const {
  return current_call_.dispatch == this ? current_call_.registration : nullptr;
}

Result<HandlerId> HandlerDispatch::Register(Gid thread, Mailbox& mailbox, Selector selector,
                                            const HandlerOptions& options,
                                            HandlerFunction function) {
  auto registration = std::make_shared<Registration>(*this);
  registration->thread = thread;
  registration->mailbox = &mailbox;
  registration->function = std::move(function);
  registration->max_calls = options.ordered ? 1 : options.max_concurrent_calls;
  registration->post.selector = selector;
  registration->post.standing = registration.get();
  // Held across the table and the post: Stop withdraws every registration
  // it finds, so none may be posted after it looked.
  std::lock_guard registering(register_mu_);
  HandlerId id = 0;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return Unavailable("the runtime is shutting down");
    id = next_id_++;
    registration->id = id;
    registrations_.emplace(id, registration);
    lanes_.fetch_or(uint32_t{1} << wire::LaneOf(thread), std::memory_order_relaxed);
    // A lead polls before the first message comes.
    if (pool_.empty()) AddThreadLocked();
  }
  // Claims what is queued already (Claimed takes mu_ under the mailbox's lock).
  if (!mailbox.Post(&registration->post)) {
    // The thread left since the caller looked: nothing was posted.
    std::lock_guard lock(mu_);
    registrations_.erase(id);
    CountLanesLocked();
    return FailedPrecondition(fmt::format("thread {} has left", thread.ToString()));
  }
  return id;
}

bool HandlerDispatch::WaitsForLocked(const Registration* target, const Registration* caller) const {
  std::vector<const Registration*> todo{target};
  std::vector<const Registration*> seen;
  while (!todo.empty()) {
    const Registration* next = todo.back();
    todo.pop_back();
    if (next == caller) return true;
    if (std::find(seen.begin(), seen.end(), next) != seen.end()) continue;
    seen.push_back(next);
    todo.insert(todo.end(), next->waiting_for.begin(), next->waiting_for.end());
  }
  return false;
}

Status HandlerDispatch::Cancel(HandlerId id) {
  std::shared_ptr<Registration> registration;
  {
    std::lock_guard lock(mu_);
    auto it = registrations_.find(id);
    if (it == registrations_.end()) {
      return NotFound(fmt::format("no handler {} (cancelled already, or never registered)", id));
    }
    registration = std::move(it->second);
    registrations_.erase(it);
    CountLanesLocked();
    registration->cancelled = true;
    if (registration->ready) {
      ready_.erase(std::find(ready_.begin(), ready_.end(), registration.get()));
      registration->ready = false;
      work_.store(!ready_.empty(), std::memory_order_release);
    }
  }
  // No claim is taken after this (TakeClaimed and the withdrawal share the
  // mailbox's lock): what is left stays queued, unclaimed.
  registration->mailbox->WithdrawStanding(&registration->post);
  std::unique_lock lock(mu_);
  Registration* waiter = Caller();
  // From its own call, or from a call that the target's calls wait for:
  // waiting for the running calls would never end. What they handle is
  // settled already: the withdrawal above (under the mailbox's lock, as
  // TakeClaimed) left a call that had not taken its message nothing to
  // take.
  if (waiter == registration.get() ||
      (waiter != nullptr && WaitsForLocked(registration.get(), waiter))) {
    // Its running calls end after this returns: the last one frees it.
    if (registration->running > 0) retired_.push_back(std::move(registration));
    return Status::Ok();
  }
  if (waiter != nullptr) waiter->waiting_for.push_back(registration.get());
  finished_cv_.wait(lock, [&] { return registration->running == 0; });
  if (waiter != nullptr) {
    waiter->waiting_for.erase(
        std::find(waiter->waiting_for.begin(), waiter->waiting_for.end(), registration.get()));
  }
  return Status::Ok();
}

void HandlerDispatch::CountLanesLocked() {
  uint32_t lanes = 0;
  for (const auto& [id, registration] : registrations_) {
    lanes |= uint32_t{1} << wire::LaneOf(registration->thread);
  }
  lanes_.store(lanes, std::memory_order_relaxed);
}

bool HandlerDispatch::RunnableLocked(const Registration& registration) const {
  return !registration.cancelled && registration.claimed > 0 &&
         registration.running < registration.max_calls;
}

void HandlerDispatch::MakeReadyLocked(Registration& registration) {
  if (registration.ready || !RunnableLocked(registration)) return;
  registration.ready = true;
  ready_.push_back(&registration);
  work_.store(true, std::memory_order_release);
}

void HandlerDispatch::Claimed(Registration& registration) {
  std::lock_guard lock(mu_);
  ++registration.claimed;
  MakeReadyLocked(registration);
  if (!registration.ready || NotifyLocked() || starting_ > 0) return;
  // No thread is idle or starting: every one is in a call. Work keeps one
  // idle while the pool is below its bound, so this happens only once the
  // pool is full (a thread ending its call takes the work; nothing is
  // started) or when starting a thread failed: then, and only then, the
  // delivery path starts one.
  AddThreadLocked();
}

bool HandlerDispatch::NotifyLocked() {
  if (lead_waiting_) {
    bell_.Wake();
  } else if (sleeping_ > 0) {
    idle_cv_.notify_one();
  } else {
    return false;
  }
  return true;
}

void HandlerDispatch::AddThreadLocked() {
  // Stop has taken the pool to join it.
  if (stopping_ || pool_.size() >= kMaxHandlerThreads) return;
  try {
    pool_.emplace_back([this] { Work(); });
    ++starting_;
  } catch (const std::system_error& e) {
    // Calls wait for a thread of the pool instead.
    Log().warn("tocl: cannot start a handler thread ({} running): {}", pool_.size(), e.what());
  }
}

void HandlerDispatch::Work() {
  std::unique_lock lock(mu_);
  --starting_;
  for (;;) {
    if (stopping_) return;
    const bool starting = !shutting_down_.load(std::memory_order_acquire);
    if (starting && !ready_.empty()) {
      Registration* front = ready_.front();
      ready_.pop_front();
      --front->claimed;
      ++front->running;
      // Still runnable (an unordered one with more claims): back in line,
      // behind the others.
      if (RunnableLocked(*front)) {
        ready_.push_back(front);
      } else {
        front->ready = false;
      }
      work_.store(!ready_.empty(), std::memory_order_release);
      // Leaving for a call: the work still ready goes to the lead or a
      // sleeper. With none of them left (nor a thread starting), add one
      // here, off the delivery path, so that a claim made while the calls
      // run finds a thread to tell.
      if (!ready_.empty()) (void)NotifyLocked();
      if (!lead_waiting_ && sleeping_ == 0 && starting_ == 0) AddThreadLocked();
      RunCall(*front, lock);
      continue;
    }
    if (starting && !lead_waiting_) {
      lead_waiting_ = true;
      lock.unlock();
      (void)receive_.Await(
          bell_, ReceiveSide::Clock::time_point::max(), true,
          [this] { return work_.load(std::memory_order_acquire); }, &lanes_);
      lock.lock();
      lead_waiting_ = false;
      continue;
    }
    ++sleeping_;
    idle_cv_.wait(lock);
    --sleeping_;
  }
}

void HandlerDispatch::RunCall(Registration& r, std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  if (detail::BufferSlot* slot = r.mailbox->TakeClaimed(&r.post)) Call(r, slot);
  lock.lock();
  --r.running;
  MakeReadyLocked(r);  // an ordered one's next message
  if (r.cancelled || stopping_) finished_cv_.notify_all();
  if (r.cancelled && r.running == 0) ReleaseRetiredLocked(r, lock);
}

void HandlerDispatch::ReleaseRetiredLocked(Registration& r, std::unique_lock<std::mutex>& lock) {
  auto it = std::find_if(retired_.begin(), retired_.end(),
                         [&](const auto& retired) { return retired.get() == &r; });
  if (it == retired_.end()) return;  // its Cancel or Stop holds it
  std::shared_ptr<Registration> last = std::move(*it);
  retired_.erase(it);
  // The handler's function (and what it captured) is destroyed without
  // mu_: its destructors may call into the runtime.
  lock.unlock();
  last.reset();
  lock.lock();
}

void HandlerDispatch::Call(Registration& r, detail::BufferSlot* slot) {
  receive_.NoteReceived(slot);
  HandlerContext call;
  call.handler = r.id;
  call.self = r.thread;
  call.message = Buffer(slot);
  call.info = MessageInfo{call.message.source(), call.message.tag(), call.message.size()};
  // Shutdown began since the call was counted: it does not start (the
  // message goes, as every unreceived one does at shutdown).
  if (!shutting_down_.load(std::memory_order_acquire)) {
    current_call_ = CurrentCall{this, &r};
    try {
      r.function(call);
    } catch (const std::exception& e) {
      Log().error("tocl: handler {} on {} threw on a message from {} (tag {}): {}", r.id,
                  r.thread.ToString(), call.info.source.ToString(), call.info.tag, e.what());
    } catch (...) {
      Log().error("tocl: handler {} on {} threw on a message from {} (tag {})", r.id,
                  r.thread.ToString(), call.info.source.ToString(), call.info.tag);
    }
    current_call_ = CurrentCall{};
  }
}

void HandlerDispatch::Stop() {
  std::vector<std::shared_ptr<Registration>> all;
  std::vector<std::thread> threads;
  {
    // A Register under way finishes its post first; later ones see
    // stopping_. Not held while calls are waited for: one may be in
    // Register.
    std::unique_lock registering(register_mu_);
    std::unique_lock lock(mu_);
    registering.unlock();
    stopping_ = true;
    for (auto& [id, registration] : registrations_) {
      registration->cancelled = true;
      registration->ready = false;
      all.push_back(registration);
    }
    registrations_.clear();
    lanes_.store(0, std::memory_order_relaxed);
    ready_.clear();
    work_.store(true, std::memory_order_release);  // the lead's wait ends
    idle_cv_.notify_all();
    bell_.Wake();
    finished_cv_.wait(lock, [&] {
      return std::all_of(all.begin(), all.end(), [](const auto& r) { return r->running == 0; });
    });
    threads.swap(pool_);
  }
  for (auto& registration : all) registration->mailbox->WithdrawStanding(&registration->post);
  for (std::thread& thread : threads) thread.join();
}

}  // namespace tocl::runtime
