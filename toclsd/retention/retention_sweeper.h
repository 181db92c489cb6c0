// Removes exited entities once `retain` has passed since they exited: a
// thread that wakes every `retain / 10` (0.1 s .. 60 s), checks on a read
// connection whether anything is due, and removes it through the store's
// single writer in batches of at most kBatchEntities entities (one writer
// operation each), so a backlog of thousands is cleared between other
// writes instead of in one long transaction. The processes a batch removed
// are handed to `on_removed` (the spawner deletes their log files).
//
// Thread-safe: Stop() may be called from any thread; the callback runs on
// the sweeper's thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <span>
#include <thread>

#include "store/store.h"

namespace tocl::daemon::retention {

class RetentionSweeper {
 public:
  using OnRemoved = std::function<void(std::span<const Gid> processes)>;

  // Entities removed by one writer operation (a few milliseconds of work).
  static constexpr size_t kBatchEntities = 1000;

  // `retain` must be positive (0, "for ever", is no sweeper at all).
  RetentionSweeper(directory::Store& store, std::chrono::microseconds retain, OnRemoved on_removed);
  ~RetentionSweeper();  // Stop()
  RetentionSweeper(const RetentionSweeper&) = delete;
  RetentionSweeper& operator=(const RetentionSweeper&) = delete;

  void Stop();

  // How often a sweeper with `retain` looks: a tenth of it, within 0.1 s ..
  // 60 s, so an entity goes between `retain` and `retain` + that after its exit.
  static std::chrono::milliseconds PeriodFor(std::chrono::microseconds retain);

 private:
  void Loop();
  // Removes everything due now; false when the daemon is stopping.
  bool Sweep();

  directory::Store& store_;
  const std::chrono::microseconds retain_;
  const std::chrono::milliseconds period_;
  const OnRemoved on_removed_;
  std::mutex mu_;
  std::condition_variable wake_;  // signalled by Stop
  bool stopping_ = false;         // guarded by mu_
  std::thread thread_;            // last: starts after everything it uses
};

}  // namespace tocl::daemon::retention
