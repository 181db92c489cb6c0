#include "runtime/background_sends.h"

#include <chrono>
#include <optional>

namespace tocl::runtime {

namespace {

Status ShuttingDown() {
  return Unavailable("the runtime is shutting down");
}

}  // namespace

BackgroundSends::BackgroundSends(LongSender& sender, ReceiveSide& receive)
    : sender_(sender), receive_(receive) {}

Status BackgroundSends::Start(SendJob& job, Gid from, Gid to, Tag tag,
                              std::span<const std::byte> payload) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return ShuttingDown();
  }
  TOCL_RETURN_IF_ERROR(sender_.Begin(*job.peer, from, to, tag, payload, &wake_, job.send));
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      added_.push_back(&job);
      if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
      wake_.Wake();
      return Status::Ok();
    }
  }
  // Stopped while the start was posted: nobody will carry it.
  sender_.End(*job.peer, job.send, ShuttingDown());
  return ShuttingDown();
}

void BackgroundSends::Stop() {
  std::thread thread;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    thread = std::move(thread_);
  }
  wake_.Wake();
  if (thread.joinable()) thread.join();
}

void BackgroundSends::Complete(SendJob& job, const Status& result) {
  sender_.End(*job.peer, job.send, result);
  job.status = result;
  // Read before `done`: the owner may free the job as soon as it is set.
  Mailbox* owner = job.owner;
  // seq_cst: as PostedReceive::Complete (a waiter across threads).
  job.done.store(true, std::memory_order_seq_cst);
  receive_.NoteRequestDone();
  if (owner != nullptr) owner->Wake();
}

void BackgroundSends::Loop() {
  std::vector<SendJob*> active;
  bool listening = false;
  for (;;) {
    // Read before looking: an acknowledgement after the look moves it on.
    const uint32_t seen = wake_.signal();
    bool stopping = false;
    {
      std::lock_guard lock(mu_);
      active.insert(active.end(), added_.begin(), added_.end());
      added_.clear();
      stopping = stopping_;
    }
    if (!listening && !active.empty()) {
      // A network may have no room (shm: no buffer provided yet); its
      // owner rings our bell when it provides more.
      sender_.ListenForBells(true);
      listening = true;
    }
    for (size_t i = 0; i < active.size();) {
      std::optional<Status> result = sender_.Step(*active[i]->peer, active[i]->send);
      if (!result && stopping) result = ShuttingDown();
      if (!result) {
        ++i;
        continue;
      }
      Complete(*active[i], *result);
      active[i] = active.back();
      active.pop_back();
    }
    active_count_.store(active.size(), std::memory_order_relaxed);
    if (listening && active.empty()) {
      sender_.ListenForBells(false);
      listening = false;
    }
    if (active.empty()) {
      if (stopping) return;  // added_ was empty when `stopping` was read
      wake_.Wait(seen, std::chrono::steady_clock::now() + std::chrono::seconds(1));
      continue;
    }
    const auto until = std::chrono::steady_clock::now() + sender_.StepWait();
    receive_.AwaitSignal(wake_, seen, until, until);
  }
}

}  // namespace tocl::runtime
