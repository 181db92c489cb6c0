#include "tocl/request.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <utility>

#include "buffers/buffer_pool.h"
#include "core/deadline.h"
#include "runtime/request_state.h"

namespace tocl {

using Clock = std::chrono::steady_clock;

namespace detail {

void RequestState::Finish() {
  if (finished) return;
  finished = true;
  switch (kind) {
    case Request::Kind::kSend:
      if (send != nullptr) post.status = send->status;
      return;
    case Request::Kind::kRecv:
      // No slot (cancelled, failed): the runtime is not needed, and may be gone.
      if (post.slot != nullptr) buffer = Buffer(receive->TakeSlot(post));
      return;
    case Request::Kind::kRecvInto:
      if (post.slot != nullptr) post.status = receive->FinishInto(post).status();
      return;
  }
}

}  // namespace detail

namespace {

Status Empty(const char* what) {
  return InvalidArgument(fmt::format("{} on an empty request (default-made or moved from)", what));
}

// Withdraws a pending receive: true when it took nothing (it is then
// complete with Cancelled).
bool Withdraw(detail::RequestState& state) {
  if (!state.receive->Withdraw(*state.mailbox, state.post)) return false;
  state.post.Complete(Status(StatusCode::kCancelled, "the request was cancelled"));
  return true;
}

// Waits until `done()`: on their mailbox when every pending request is of
// one thread, else on the process's completions (RequestCompletions).
Status AwaitRequests(std::span<Request> requests, Clock::time_point deadline,
                     const std::function<bool()>& done) {
  detail::RequestState* first = nullptr;
  bool one_mailbox = true;
  for (Request& request : requests) {
    detail::RequestState* state = request.state();
    if (state == nullptr || state->Complete()) continue;
    if (first == nullptr) {
      first = state;
    } else if (state->mailbox != first->mailbox) {
      one_mailbox = false;
    }
  }
  if (first == nullptr) return Status::Ok();
  Status waited = one_mailbox ? first->receive->Await(*first->mailbox, deadline, true, done)
                              : first->receive->AwaitAcross(deadline, done);
  if (waited.ok() || done()) return Status::Ok();
  return waited;
}

}  // namespace

Request::Request() = default;

Request::Request(std::unique_ptr<detail::RequestState> state) : state_(std::move(state)) {}

Request::Request(Request&& other) noexcept = default;

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    Request gone(std::move(*this));  // a pending one is cancelled (or waited for) here
    state_ = std::move(other.state_);
  }
  return *this;
}

Request::~Request() {
  if (state_ == nullptr || state_->finished) return;
  if (state_->kind == Kind::kSend) {
    // The library reads the caller's memory, and the background thread the
    // job, until the send is done. Wait returns early only while the
    // runtime shuts down, which then completes the job within a step and
    // wakes its owner's mailbox (BackgroundSends::Complete).
    if (!Wait().ok()) {
      for (;;) {
        const uint32_t seen = state_->mailbox->signal();
        if (state_->Complete()) break;
        state_->mailbox->Wait(seen, Clock::time_point::max());
      }
    }
    return;
  }
  if (!state_->Complete() && Withdraw(*state_)) return;
  // It completed: its message goes with it, not into the caller's memory
  // (which may be gone with the request).
  if (state_->post.slot != nullptr) {
    detail::BufferSlot* slot = state_->receive->TakeSlot(state_->post);
    slot->pool->Unref(slot);
  }
}

Request::Kind Request::kind() const {
  return state_ != nullptr ? state_->kind : Kind::kSend;
}

Status Request::Wait(std::chrono::nanoseconds timeout) {
  if (state_ == nullptr) return Empty("Wait");
  detail::RequestState& state = *state_;
  if (!state.Complete()) {
    Status waited = state.receive->Await(*state.mailbox, DeadlineAfter(timeout), true,
                                         [&] { return state.Complete(); });
    if (!waited.ok() && !state.Complete()) return waited;
  }
  state.Finish();
  return state.post.status;
}

Status Request::Test() {
  if (state_ == nullptr) return Empty("Test");
  detail::RequestState& state = *state_;
  if (!state.Complete()) {
    Status looked =
        state.receive->Await(*state.mailbox, Clock::now(), false, [&] { return state.Complete(); });
    if (!looked.ok() && !state.Complete()) {
      // Not done: TryAgain; or why it cannot be (shutting down, thread left).
      return looked.code() == StatusCode::kTryAgain ||
                     looked.code() == StatusCode::kDeadlineExceeded
                 ? Status(StatusCode::kTryAgain, "the request is pending")
                 : looked;
    }
  }
  state.Finish();
  return state.post.status;
}

Status Request::Cancel() {
  if (state_ == nullptr) return Empty("Cancel");
  detail::RequestState& state = *state_;
  if (state.kind == Kind::kSend) return FailedPrecondition("a send request cannot be cancelled");
  if (state.finished && state.post.status.code() == StatusCode::kCancelled) {
    return FailedPrecondition("the request was cancelled already");
  }
  if (!state.Complete() && Withdraw(state)) {
    state.Finish();
    return Status::Ok();
  }
  state.Finish();
  if (state.post.status.code() == StatusCode::kCancelled) {
    return FailedPrecondition("the request was cancelled already (the runtime shut down)");
  }
  return FailedPrecondition(
      state.post.status.ok()
          ? "the request completed before it could be cancelled: the message is its"
          : "the request completed (with an error) before it could be cancelled");
}

Status Request::status() const {
  return state_ != nullptr && state_->finished ? state_->post.status : Status::Ok();
}

MessageInfo Request::info() const {
  return state_ != nullptr && state_->finished ? state_->post.info : MessageInfo{};
}

Result<Buffer> Request::TakeBuffer() {
  if (state_ == nullptr) return Empty("TakeBuffer");
  detail::RequestState& state = *state_;
  if (state.kind != Kind::kRecv) {
    return FailedPrecondition("TakeBuffer is for Irecv requests (IrecvInto fills your memory)");
  }
  if (!state.finished) {
    if (!state.Complete()) return FailedPrecondition("the request is pending");
    state.Finish();
  }
  TOCL_RETURN_IF_ERROR(state.post.status);
  if (state.taken) return FailedPrecondition("the request's message was taken already");
  state.taken = true;
  return std::move(state.buffer);
}

Result<size_t> WaitAny(std::span<Request> requests, std::chrono::nanoseconds timeout) {
  const auto deadline = DeadlineAfter(timeout);
  auto first_complete = [&]() -> std::optional<size_t> {
    for (size_t i = 0; i < requests.size(); ++i) {
      detail::RequestState* state = requests[i].state();
      if (state != nullptr && state->Complete()) return i;
    }
    return std::nullopt;
  };
  if (std::none_of(requests.begin(), requests.end(), [](const Request& r) { return r.valid(); })) {
    return InvalidArgument("WaitAny on no requests (every one is empty)");
  }
  if (!first_complete()) {
    TOCL_RETURN_IF_ERROR(
        AwaitRequests(requests, deadline, [&] { return first_complete().has_value(); }));
  }
  const size_t index = *first_complete();
  requests[index].state()->Finish();
  return index;
}

Status WaitAll(std::span<Request> requests, std::chrono::nanoseconds timeout) {
  const auto deadline = DeadlineAfter(timeout);
  // Requests before `next` are complete (or empty): each is looked at until
  // it completes, not at every wake-up.
  size_t next = 0;
  auto all_complete = [&] {
    while (next < requests.size() &&
           (!requests[next].valid() || requests[next].state()->Complete())) {
      ++next;
    }
    return next == requests.size();
  };
  if (!all_complete()) {
    Status waited = AwaitRequests(requests, deadline, all_complete);
    if (!waited.ok()) {
      if (waited.code() != StatusCode::kDeadlineExceeded) return waited;
      const auto pending = std::count_if(requests.begin(), requests.end(), [](Request& r) {
        return r.valid() && !r.state()->Complete();
      });
      return DeadlineExceeded(
          fmt::format("{} of {} requests are still pending", pending, requests.size()));
    }
  }
  size_t failed = 0;
  Status first;
  size_t first_index = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    detail::RequestState* state = requests[i].state();
    if (state == nullptr) continue;
    state->Finish();
    if (state->post.status.ok()) continue;
    if (failed++ == 0) {
      first = state->post.status;
      first_index = i;
    }
  }
  if (failed == 0) return Status::Ok();
  return Status(first.code(), fmt::format("{} of {} requests failed; the first, #{}: {}", failed,
                                          requests.size(), first_index, first.message()));
}

}  // namespace tocl
