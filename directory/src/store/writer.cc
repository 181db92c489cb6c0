#include "store/writer.h"

#include <spdlog/spdlog.h>

#include <vector>

namespace tocl::directory {

// A write waiting for its commit. Lives on its caller's stack and has its
// own lock, so that a caller returning from Run() never touches the Writer
// again (the Writer may be destroyed as soon as its last job is answered).
struct Writer::Job {
  Operation op;
  Status result;
  std::mutex mu;
  std::condition_variable finished;
  bool done = false;  // guarded by mu

  void Finish(Status status) {
    std::lock_guard lock(mu);
    result = std::move(status);
    done = true;
    finished.notify_one();  // under the lock: the Job may vanish right after
  }
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
  Job job;
  job.op = std::move(op);
  {
    std::lock_guard lock(mu_);
    if (stopping_) return Unavailable("the directory is shutting down");
    queue_.push_back(&job);
  }
  queued_.notify_one();
  std::unique_lock lock(job.mu);
  job.finished.wait(lock, [&] { return job.done; });
  return std::move(job.result);
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
    batch.clear();
  }
}

void Writer::CommitBatch(std::deque<Job*>& batch) {
  // Jobs whose op succeeded in the open transaction: they live or die with
  // its commit.
  std::vector<Job*> pending;
  std::vector<std::pair<Job*, Status>> answered;  // failed ops, answered after the commit
  bool in_transaction = false;

  // SQLite rolls a whole transaction back by itself after some errors
  // (I/O, out of memory, disk full in some paths). Everything done in it so
  // far is gone: those callers are told, and a new transaction starts.
  auto lost_transaction = [&](const Status& cause) {
    for (Job* job : pending) {
      answered.emplace_back(job, Unavailable("the write was rolled back by the database (" +
                                             cause.message() + "); retry"));
    }
    pending.clear();
    in_transaction = false;
  };

  for (Job* job : batch) {
    if (!in_transaction) {
      Status begin = db_.Exec("BEGIN IMMEDIATE");
      if (!begin.ok()) {
        spdlog::error("directory write transaction could not start: {}", begin.ToString());
        answered.emplace_back(job, begin);
        continue;
      }
      in_transaction = true;
    }
    Status status = db_.Exec("SAVEPOINT op");
    if (status.ok()) status = job->op(db_);
    if (status.ok()) status = db_.Exec("RELEASE op");
    if (status.ok()) {
      pending.push_back(job);
      continue;
    }
    answered.emplace_back(job, status);
    if (sqlite3_get_autocommit(db_.get())) {
      lost_transaction(status);
      continue;
    }
    // The op's own error is what its caller needs; undo only its changes.
    Status undo = db_.Exec("ROLLBACK TO op; RELEASE op");
    if (!undo.ok()) {
      spdlog::error("directory savepoint rollback: {}", undo.ToString());
      if (!sqlite3_get_autocommit(db_.get())) (void)db_.Exec("ROLLBACK");
      lost_transaction(undo);
    }
  }

  if (in_transaction) {
    Status commit = db_.Exec("COMMIT");
    if (!commit.ok()) {
      spdlog::error("directory commit failed, {} writes refused: {}", pending.size(),
                    commit.ToString());
      if (!sqlite3_get_autocommit(db_.get())) (void)db_.Exec("ROLLBACK");
      for (Job* job : pending) answered.emplace_back(job, commit);
      pending.clear();
    }
  }
  if (!pending.empty()) {
    {
      std::lock_guard lock(mu_);
      operations_ += pending.size();
      ++commits_;
    }
    if (on_commit_) on_commit_(db_);
  }
  // Answer only after the commit: an acknowledged write is durable.
  for (Job* job : pending) job->Finish(Status::Ok());
  for (auto& [job, status] : answered) job->Finish(std::move(status));
}

}  // namespace tocl::directory
