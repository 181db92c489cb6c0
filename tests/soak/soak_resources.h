// Resident memory and open descriptors of the soak's daemons and workers,
// sampled from /proc during the run: each process's first sample once it
// has run for the warm-up is its baseline, and its growth is the last
// sample minus that. No Catch2 here.
//
//   ResourceTracker resources(std::chrono::seconds(20));
//   resources.Sample("toclsd h1", pid);   // every few seconds, for every process
//   for (const std::string& problem : resources.Check(bounds)) ...
//
// Threading: one owner thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tocl::testing {

struct ResourceSample {
  int64_t rss_kib = 0;
  int fds = 0;
};

// One process (a label and a pid: a restarted daemon is a new record).
struct ResourceRecord {
  std::string label;  // "toclsd h2", "worker h2#3"
  pid_t pid = 0;
  std::chrono::steady_clock::time_point first_seen;
  std::optional<ResourceSample> baseline;
  std::chrono::steady_clock::time_point baseline_at;
  ResourceSample last;
  std::chrono::steady_clock::time_point last_at;
  ResourceSample peak;

  // Seconds from baseline to the last sample (0 without a baseline).
  double ObservedSeconds() const;
  int64_t RssGrowthKib() const { return baseline ? last.rss_kib - baseline->rss_kib : 0; }
  int FdGrowth() const { return baseline ? last.fds - baseline->fds : 0; }
};

struct ResourceBounds {
  int64_t worker_rss_growth_kib = 0;
  int64_t daemon_rss_growth_kib = 0;
  int fd_growth = 0;
  // Processes observed for less than this (from baseline to last sample)
  // are reported but not checked: their figures are noise.
  std::chrono::seconds min_observed{30};
};

class ResourceTracker {
 public:
  explicit ResourceTracker(std::chrono::milliseconds warmup) : warmup_(warmup) {}

  // Samples the process now; a process that no longer runs is skipped.
  void Sample(const std::string& label, pid_t pid);
  const std::vector<ResourceRecord>& records() const { return records_; }

  // A sentence for each checked process over its bound (labels starting
  // with "toclsd" take the daemon bound, the others the worker bound).
  std::vector<std::string> Check(const ResourceBounds& bounds) const;
  // One line per process: baseline, last, peak, growth.
  std::string Report() const;

 private:
  const std::chrono::milliseconds warmup_;
  std::vector<ResourceRecord> records_;
};

}  // namespace tocl::testing
