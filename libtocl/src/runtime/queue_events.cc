#include "runtime/queue_events.h"

#include "core/logger.h"

namespace tocl::runtime {

void QueueEvents::Queued(SendQueue& queue, bool list) {
  if (list) {
    std::lock_guard lock(waiting_mu_);
    waiting_.push_back(&queue);
  }
  // A queue already waiting has woken the poller when it started to.
  progress_->NoteQueued(/*first=*/list);
}

void QueueEvents::Rerouted(const SendQueue& queue, int broken_network, int alternative_network) {
  Log().warn("tocl: network {} to {} broke; its frames go over {}",
             rails_[broken_network]->Describe(), queue.process().ToString(),
             rails_[alternative_network]->Describe());
  rails_[broken_network]->NoteFailure();
}

void QueueEvents::AwaitProgress() {
  progress_->TryPollOnce();
}

bool QueueEvents::RetryWaiting() {
  // Swapping with the poller's own vector keeps both capacities: no
  // allocation per poll round while sends wait.
  {
    std::lock_guard lock(waiting_mu_);
    retrying_.swap(waiting_);
  }
  std::erase_if(retrying_, [](SendQueue* peer) { return !peer->Retry(); });
  if (retrying_.empty()) return false;
  std::lock_guard lock(waiting_mu_);
  waiting_.insert(waiting_.end(), retrying_.begin(), retrying_.end());
  retrying_.clear();
  return true;
}

}  // namespace tocl::runtime
