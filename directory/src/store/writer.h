// The single writer of the directory database, with group commit.
//
// Every write runs as an operation on one writer thread. The thread takes
// all operations that queued up while the previous commit was on disk, runs
// each inside its own SAVEPOINT of one transaction (a failing operation rolls
// back alone), commits once (one fsync for the batch), and only then tells
// the callers. So an acknowledged write is durable, and many concurrent
// writers share one fsync instead of queueing for one each.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "store/sqlite.h"

namespace tocl::directory {

class Writer {
 public:
  using Operation = std::function<Status(Database&)>;

  // Takes the connection; `on_commit` runs on the writer thread after every
  // successful commit (the store uses it to wake watchers).
  Writer(Database db, std::function<void(Database&)> on_commit);
  ~Writer();  // finishes queued operations, then stops
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Runs `op` inside the next group transaction and waits for the commit.
  // Returns the op's error if it failed (its changes are rolled back), the
  // commit's error if the commit failed, else ok. Outputs the op wrote are
  // valid only when this returns ok.
  Status Run(Operation op);

  // Operations committed so far and commits made (group-commit efficiency).
  uint64_t operations() const;
  uint64_t commits() const;

 private:
  struct Job;
  void Loop();
  void CommitBatch(std::deque<Job*>& batch);

  Database db_;  // used only on the writer thread
  std::function<void(Database&)> on_commit_;

  mutable std::mutex mu_;
  std::condition_variable queued_;  // signalled when a job is queued or stopping_ is set
  std::deque<Job*> queue_;          // guarded by mu_
  bool stopping_ = false;           // guarded by mu_
  uint64_t operations_ = 0;         // guarded by mu_
  uint64_t commits_ = 0;            // guarded by mu_

  std::thread thread_;  // last: starts after everything it uses exists
};

}  // namespace tocl::directory
