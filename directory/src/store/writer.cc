#include "store/writer.h"

#include <spdlog/spdlog.h>

namespace tocl::directory {

struct Writer::Job {
  Operation op;
  Status result;
  bool done = false;  // guarded by Writer::mu_
  std::condition_variable finished;
};

Writer::Writer(Database db, std::function<void(Database&)> on_commit)
    : db_(std::move(db)), on_commit_(std::move(on_commit)), thread_([this] { Loop(); }) {}

Writer::~Writer() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  queued_.notify_all();
  thread_.join();
}

Status Writer::Run(Operation op) {
  Job job{std::move(op), Status::Ok(), false, {}};
  std::unique_lock lock(mu_);
  if (stopping_) return Unavailable("the directory is shutting down");
  queue_.push_back(&job);
  queued_.notify_one();
  job.finished.wait(lock, [&] { return job.done; });
  return job.result;
}

uint64_t Writer::operations() const {
  std::lock_guard lock(mu_);
  return operations_;
}

uint64_t Writer::commits() const {
  std::lock_guard lock(mu_);
  return commits_;
}

void Writer::Loop() {
  std::deque<Job*> batch;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      queued_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to do
      batch.swap(queue_);
    }
    CommitBatch(batch);
    {
      // Notify under the lock: a Job lives on its caller's stack and may be
      // gone as soon as the caller sees `done` without holding mu_.
      std::lock_guard lock(mu_);
      for (Job* job : batch) {
        job->done = true;
        job->finished.notify_one();
      }
    }
    batch.clear();
  }
}

void Writer::CommitBatch(std::deque<Job*>& batch) {
  Status begin = db_.Exec("BEGIN IMMEDIATE");
  if (!begin.ok()) {
    spdlog::error("directory write transaction could not start: {}", begin.ToString());
    for (Job* job : batch) job->result = begin;
    return;
  }
  size_t succeeded = 0;
  for (Job* job : batch) {
    Status status = db_.Exec("SAVEPOINT op");
    if (status.ok()) status = job->op(db_);
    if (status.ok()) {
      status = db_.Exec("RELEASE op");
      ++succeeded;
    } else {
      // The op's own error is what its caller needs; undo only its changes.
      Status undo = db_.Exec("ROLLBACK TO op; RELEASE op");
      if (!undo.ok()) spdlog::error("directory savepoint rollback: {}", undo.ToString());
    }
    job->result = status;
  }
  Status commit = db_.Exec("COMMIT");
  if (!commit.ok()) {
    spdlog::error("directory commit failed, {} writes refused: {}", batch.size(),
                  commit.ToString());
    (void)db_.Exec("ROLLBACK");
    for (Job* job : batch) {
      if (job->result.ok()) job->result = commit;
    }
    return;
  }
  {
    std::lock_guard lock(mu_);
    operations_ += succeeded;
    ++commits_;
  }
  if (succeeded > 0 && on_commit_) on_commit_(db_);
}

}  // namespace tocl::directory
