#include "retention/retention_sweeper.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace tocl::daemon::retention {
namespace {

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::chrono::milliseconds RetentionSweeper::PeriodFor(std::chrono::microseconds retain) {
  using std::chrono::milliseconds;
  return std::clamp(std::chrono::duration_cast<milliseconds>(retain / 10), milliseconds(100),
                    milliseconds(60'000));
}

RetentionSweeper::RetentionSweeper(directory::Store& store, std::chrono::microseconds retain,
                                   OnRemoved on_removed)
    : store_(store),
      retain_(retain),
      period_(PeriodFor(retain)),
      on_removed_(std::move(on_removed)),
      thread_([this] { Loop(); }) {}

RetentionSweeper::~RetentionSweeper() {
  Stop();
}

void RetentionSweeper::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void RetentionSweeper::Loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    const bool go_on = Sweep();
    lock.lock();
    if (!go_on) return;
    wake_.wait_for(lock, period_, [this] { return stopping_; });
  }
}

bool RetentionSweeper::Sweep() {
  // One cutoff per sweep: entities that become due while it runs wait for
  // the next, so a steady stream of exits cannot keep it going for ever.
  const int64_t cutoff = NowMicros() - retain_.count();
  Result<bool> due = store_.HasExitedBefore(cutoff);
  if (!due.ok()) {
    spdlog::error("retention: looking for exited entities: {}", due.status().ToString());
    return true;
  }
  if (!*due) return true;
  size_t processes = 0;
  uint64_t threads = 0;
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return false;
    }
    const auto batch_start = std::chrono::steady_clock::now();
    Result<directory::Removal> removal = store_.RemoveExited(cutoff, kBatchEntities);
    if (!removal.ok()) {
      // The writer refused (disk full, shutting down): the next sweep tries again.
      spdlog::error("retention: removing exited entities: {}", removal.status().ToString());
      break;
    }
    spdlog::debug(
        "retention: a batch of {} processes and {} threads took {:.1f} ms",
        removal->processes.size(), removal->threads,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - batch_start)
            .count());
    processes += removal->processes.size();
    threads += removal->threads;
    if (!removal->processes.empty() && on_removed_) on_removed_(removal->processes);
    if (!removal->more) break;
  }
  if (processes > 0 || threads > 0) {
    spdlog::info("retention: removed {} processes and {} threads that exited over {:.0f} s ago",
                 processes, threads, std::chrono::duration<double>(retain_).count());
  }
  return true;
}

}  // namespace tocl::daemon::retention
