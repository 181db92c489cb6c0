// What the send queues need of the runtime (SendQueue::Events): the
// poller's list of queues with frames waiting, retried every poll round;
// a network's failure count and warning when a route of it broke; progress
// while a sender waits for room.
//
// The list is swapped out whole by the poller (RetryWaiting), so a queue
// listing itself (Queued, under its mu()) never waits for a retry round.
//
// Threading: Queued and Rerouted under the queue's mu(), from any thread;
// AwaitProgress from a waiting sender; RetryWaiting by the poll token's
// holder only. The progress engine is attached once the networks are open,
// before any queue is made.
#pragma once

#include <mutex>
#include <vector>

#include "runtime/progress_engine.h"
#include "runtime/rails.h"
#include "runtime/send_queue.h"

namespace tocl::runtime {

class QueueEvents final : public SendQueue::Events {
 public:
  // `rails` (the networks a route's index names) must outlive this.
  explicit QueueEvents(Rails& rails) : rails_(rails) {}
  QueueEvents(const QueueEvents&) = delete;
  QueueEvents& operator=(const QueueEvents&) = delete;

  void AttachProgress(ProgressEngine& progress) { progress_ = &progress; }

  void Queued(SendQueue& queue, bool list) override;
  void Rerouted(const SendQueue& queue, int broken_network, int alternative_network) override;
  void AwaitProgress() override;

  // Retries the listed queues (SendQueue::Retry). True while some still
  // have frames waiting.
  bool RetryWaiting();

 private:
  Rails& rails_;
  ProgressEngine* progress_ = nullptr;
  // Lock order: a SendQueue's mu() ──> waiting_mu_.
  std::mutex waiting_mu_;
  std::vector<SendQueue*> waiting_;   // guarded by waiting_mu_
  std::vector<SendQueue*> retrying_;  // the poll token holder's: waiting_, being retried
};

}  // namespace tocl::runtime
