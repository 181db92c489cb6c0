// Non-blocking requests (MPI's MPI_Isend / MPI_Irecv with MPI_Wait,
// MPI_Test, MPI_Waitany, MPI_Waitall): Runtime::Isend, Irecv and IrecvInto
// start an operation and return a Request; Wait, Test, WaitAny and WaitAll
// finish it.
//
//   std::vector<tocl::Request> requests;
//   for (tocl::Gid worker : workers) requests.push_back(*runtime->Irecv(me, worker, kResult));
//   while (true) {
//     tocl::Result<size_t> i = tocl::WaitAny(requests, std::chrono::seconds(10));
//     if (!i.ok()) break;  // InvalidArgument: none left; DeadlineExceeded
//     tocl::Result<tocl::Buffer> result = requests[*i].TakeBuffer();
//     ...
//     requests[*i] = tocl::Request();  // done with it: WaitAny skips empty ones
//   }
//
// What a request costs: a receive request is an entry posted on its
// thread's mailbox, completed by whichever thread delivers the message (the
// poller, a local sender); no thread waits for it. Ten thousand outstanding
// Irecvs are ten thousand small entries, not threads. A send request for a
// short message is done when Isend returns (Send's contract: queued); a
// long one is carried on by one runtime thread shared by every long Isend
// of the process (it posts their fragments in turn and waits for their
// acknowledgements), so it costs no thread of its own either.
//
// Order (MPI's rules): posted receives are matched in post order: of two
// receive requests (of one thread) whose selectors both match a message,
// the one posted first gets it, and a blocking Recv never takes a message
// that a receive request posted before it matches: such a message goes to
// the request when it arrives. Between requests and blocking receives,
// messages from one sender still match in the order they were sent. An
// Isend is ordered with the thread's other sends to the same receiver from
// the moment Isend returns (its message is numbered then), whenever it
// completes.
//
// Completion: a request completes once; its outcome (status(), and for a
// receive info() and the message) is then fixed. Wait, Test, WaitAny and
// WaitAll collect it: status() and info() read what they collected
// (TakeBuffer collects by itself). An IrecvInto's memory holds the message
// once one of them said the request is complete.
//
// Cancel: a pending receive request can be cancelled. A message that
// arrives at the same moment goes either to the request (Cancel then
// returns FailedPrecondition and the request holds it) or to the mailbox,
// where it stays for any other receive (Cancel returns Ok, the request
// completes with Cancelled); never both, never neither.
//
// Errors of a request: Cancelled (Cancel, or the runtime shut down while
// it was pending), FailedPrecondition (its thread left), InvalidArgument
// (IrecvInto: the matching message is larger than the memory; it stays
// queued), and a long message's failures: Unavailable (its sender gave
// up, or for Isend, what Send returns).
//
// Lifetime: a Request is a move-only handle. Destroying a pending receive
// request cancels it (a message it had already received is dropped with
// it, as a Buffer would be); destroying a pending long send request waits
// until the send is done, since the library reads the caller's memory
// until then. Shutdown completes every pending request (Cancelled for
// receives; a long send fails with Unavailable), so that nothing writes
// into or reads from application memory after it, and such a request may
// outlive its Runtime. One that received a message holds library memory,
// like a Buffer: take the message or destroy the request before the
// Runtime is destroyed.
//
// Threading: a Request is used by one thread at a time (any thread).
// WaitAny and WaitAll sleep until a request completes, whether the pending
// ones are of one thread (receives posted for it, sends from it) or of
// several.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>

#include "tocl/buffer.h"
#include "tocl/export.h"
#include "tocl/message_info.h"
#include "tocl/status.h"

namespace tocl {

namespace detail {
struct RequestState;
}

class TOCL_EXPORT Request {
 public:
  enum class Kind : uint8_t { kSend, kRecv, kRecvInto };

  Request();  // empty: valid() is false
  ~Request();
  Request(Request&& other) noexcept;
  Request& operator=(Request&& other) noexcept;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  bool valid() const { return state_ != nullptr; }
  explicit operator bool() const { return valid(); }
  Kind kind() const;

  // Waits up to `timeout` for the request to complete and returns its
  // outcome (Ok or the request's error). DeadlineExceeded when it is still
  // pending at the timeout (Wait may be called again), Cancelled when the
  // runtime shuts down meanwhile, InvalidArgument for an empty request.
  // Makes progress as Recv does: the waiting thread polls the networks
  // while it waits.
  Status Wait(std::chrono::nanoseconds timeout = std::chrono::nanoseconds::max());
  // The outcome if the request is complete, else TryAgain (after one round
  // of progress, when no other thread polls).
  Status Test();
  // Cancels a pending receive request: Ok when it was pending (it is now
  // complete with Cancelled, and took no message); FailedPrecondition when
  // it had completed already (a message is the request's, or it was
  // cancelled before) or it is a send; InvalidArgument for an empty one.
  Status Cancel();

  // Once complete (Wait or Test said so); Ok while pending.
  Status status() const;
  // A completed receive's message: its source, tag and size.
  MessageInfo info() const;
  // Irecv's message, once: FailedPrecondition while pending, for another
  // kind of request, or once taken; the request's error if it failed.
  Result<Buffer> TakeBuffer();

  // For the library.
  explicit Request(std::unique_ptr<detail::RequestState> state);
  detail::RequestState* state() const { return state_.get(); }

 private:
  std::unique_ptr<detail::RequestState> state_;
};

// Waits up to `timeout` until one of `requests` is complete and returns
// its index (the lowest complete one; it stays complete: reset it, e.g.
// requests[i] = Request(), before the next WaitAny). Empty requests are
// skipped. InvalidArgument when every request is empty, DeadlineExceeded at
// the timeout, Cancelled when the runtime shuts down meanwhile.
TOCL_EXPORT Result<size_t> WaitAny(
    std::span<Request> requests,
    std::chrono::nanoseconds timeout = std::chrono::nanoseconds::max());

// Waits up to `timeout` until every request (empty ones skipped) is
// complete. Ok when all succeeded; else, once all are complete, the first
// failure's code with how many failed ("2 of 10 requests failed; the first,
// #3: ..."). DeadlineExceeded at the timeout (say how many are pending),
// Cancelled when the runtime shuts down meanwhile.
TOCL_EXPORT Status WaitAll(std::span<Request> requests,
                           std::chrono::nanoseconds timeout = std::chrono::nanoseconds::max());

}  // namespace tocl
