#include "cluster/change_log_trimmer.h"

#include <spdlog/spdlog.h>

#include <chrono>

namespace tocl::daemon::cluster {
namespace {

constexpr auto kPeriod = std::chrono::seconds(1);

}  // namespace

ChangeLogTrimmer::ChangeLogTrimmer(directory::Store& store, uint64_t keep)
    : store_(store), keep_(keep), thread_([this] { Loop(); }) {}

ChangeLogTrimmer::~ChangeLogTrimmer() {
  Stop();
}

void ChangeLogTrimmer::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ChangeLogTrimmer::Loop() {
  Result<uint64_t> trimmed = store_.TrimmedThrough();
  uint64_t trimmed_through = trimmed.ok() ? *trimmed : 0;
  std::unique_lock lock(mu_);
  while (!stopping_) {
    // Checked in memory first: an idle daemon costs no writer operation.
    if (store_.head_seq() > trimmed_through + keep_) {
      lock.unlock();
      Result<uint64_t> deleted = store_.TrimChangeLog(keep_);
      if (!deleted.ok()) {
        spdlog::error("trimming the change log: {}", deleted.status().ToString());
      } else if (*deleted > 0) {
        spdlog::debug("change log: {} old changes trimmed", *deleted);
      }
      trimmed = store_.TrimmedThrough();
      if (trimmed.ok()) trimmed_through = *trimmed;
      lock.lock();
      // A slice was full: go on at once with the next one.
      if (deleted.ok() && *deleted > 0 && store_.head_seq() > trimmed_through + keep_) continue;
    }
    wake_.wait_for(lock, kPeriod, [this] { return stopping_; });
  }
}

}  // namespace tocl::daemon::cluster
