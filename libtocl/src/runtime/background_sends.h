// The long sends that requests carry on (Runtime::Isend of a message over
// the short maximum): one runtime thread steps every one of them in turn
// (LongSender::Begin/Step/End: probes, fragments, acknowledgements) and
// completes each request when its send is done, as Send would return.
//
// Why one thread, not one per request nor a pool: a long send is mostly
// waiting for acknowledgements, and its steps are short (a probe, a window
// of fragments). One thread that steps them all keeps thousands of
// outstanding Isends at one thread, and each send's progress goes on while
// the others wait (a FIFO pool of N workers would leave the N+1st send's
// granted start without fragments until a worker frees, and its receiver
// gives it up after partial_timeout). The thread starts with the first
// long Isend; a process that never makes one has none. While it has
// sends, it waits as a sending thread does (polling for its answers when
// nobody else polls), on a mailbox of its own that the poller signals.
//
// Threading: Add from any thread; Stop from the runtime's Shutdown.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "runtime/long_message.h"
#include "runtime/long_sender.h"
#include "runtime/mailbox.h"
#include "runtime/receive_side.h"
#include "runtime/send_queue.h"
#include "tocl/status.h"

namespace tocl::runtime {

// One long send a request waits for. Owned by its request; the thread
// holds it from Add until `done` is set, and never touches it after.
struct SendJob {
  SendQueue* peer = nullptr;
  LongSend send;
  // Signalled when the send completes: the sending thread's mailbox, where
  // its owner waits (Request::Wait, WaitAny).
  Mailbox* owner = nullptr;
  std::atomic<bool> done{false};  // seq_cst both ways (RequestCompletions)
  Status status;                  // the owner's once done
};

class BackgroundSends {
 public:
  BackgroundSends(LongSender& sender, ReceiveSide& receive);
  ~BackgroundSends() { Stop(); }
  BackgroundSends(const BackgroundSends&) = delete;
  BackgroundSends& operator=(const BackgroundSends&) = delete;

  // Begins the send of `payload` (LongSender::Begin: the start is numbered
  // and posted now) and, when that worked, hands it to the thread, which
  // completes `job`. An error from Begin (or Unavailable after Stop) is
  // returned and `job` is not taken.
  Status Start(SendJob& job, Gid from, Gid to, Tag tag, std::span<const std::byte> payload);
  // Ends the thread: the sends still going fail (the runtime is shutting
  // down: LongSender::Step says so) and their requests complete.
  void Stop();

  // Sends being carried (for tests).
  size_t active() const { return active_count_.load(std::memory_order_relaxed); }

 private:
  void Loop();
  // Completes `job` with `result` (LongSender::End first).
  void Complete(SendJob& job, const Status& result);

  LongSender& sender_;
  ReceiveSide& receive_;
  // Every send's LongSend::wake: acknowledgements and Start signal it.
  Mailbox wake_{Gid()};

  std::mutex mu_;
  std::vector<SendJob*> added_;  // guarded by mu_: taken by the thread
  bool stopping_ = false;        // guarded by mu_
  std::thread thread_;           // started by the first Start (under mu_)
  std::atomic<size_t> active_count_{0};
};

}  // namespace tocl::runtime
