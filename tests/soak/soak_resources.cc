#include "soak_resources.h"

#include <fmt/format.h>

#include <algorithm>

#include "child_process.h"

namespace tocl::testing {

using Clock = std::chrono::steady_clock;

double ResourceRecord::ObservedSeconds() const {
  if (!baseline) return 0;
  return std::chrono::duration<double>(last_at - baseline_at).count();
}

void ResourceTracker::Sample(const std::string& label, pid_t pid) {
  auto rss = ProcessRssKib(pid);
  auto fds = ProcessFdCount(pid);
  if (!rss.ok() || !fds.ok()) return;
  const auto now = Clock::now();
  auto it = std::find_if(records_.begin(), records_.end(), [&](const ResourceRecord& record) {
    return record.label == label && record.pid == pid;
  });
  if (it == records_.end()) {
    records_.push_back({label, pid, now, std::nullopt, now, {}, now, {}});
    it = records_.end() - 1;
  }
  const ResourceSample sample{*rss, *fds};
  if (!it->baseline && now - it->first_seen >= warmup_) {
    it->baseline = sample;
    it->baseline_at = now;
  }
  it->last = sample;
  it->last_at = now;
  it->peak.rss_kib = std::max(it->peak.rss_kib, sample.rss_kib);
  it->peak.fds = std::max(it->peak.fds, sample.fds);
}

std::vector<std::string> ResourceTracker::Check(const ResourceBounds& bounds) const {
  std::vector<std::string> problems;
  for (const ResourceRecord& record : records_) {
    if (!record.baseline || record.ObservedSeconds() < bounds.min_observed.count()) continue;
    const bool daemon = record.label.rfind("toclsd", 0) == 0;
    const int64_t rss_bound = daemon ? bounds.daemon_rss_growth_kib : bounds.worker_rss_growth_kib;
    if (record.RssGrowthKib() > rss_bound) {
      problems.push_back(fmt::format(
          "{} (pid {}) grew by {} KiB of RSS in {:.0f} s ({} -> {} KiB), over the bound of {} KiB",
          record.label, record.pid, record.RssGrowthKib(), record.ObservedSeconds(),
          record.baseline->rss_kib, record.last.rss_kib, rss_bound));
    }
    if (record.FdGrowth() > bounds.fd_growth) {
      problems.push_back(
          fmt::format("{} (pid {}) has {} more open descriptors after {:.0f} s ({} -> {}), over "
                      "the bound of {}",
                      record.label, record.pid, record.FdGrowth(), record.ObservedSeconds(),
                      record.baseline->fds, record.last.fds, bounds.fd_growth));
    }
  }
  return problems;
}

std::string ResourceTracker::Report() const {
  std::string text;
  for (const ResourceRecord& record : records_) {
    if (!record.baseline) {
      text += fmt::format(
          "  {:<12} pid {:>7}: no baseline (ran under the warm-up), last {} KiB "
          "{} fds\n",
          record.label, record.pid, record.last.rss_kib, record.last.fds);
      continue;
    }
    text += fmt::format(
        "  {:<12} pid {:>7}: {:>5.0f} s observed, RSS {} -> {} KiB ({:+} KiB, peak {}), "
        "fds {} -> {} ({:+}, peak {})\n",
        record.label, record.pid, record.ObservedSeconds(), record.baseline->rss_kib,
        record.last.rss_kib, record.RssGrowthKib(), record.peak.rss_kib, record.baseline->fds,
        record.last.fds, record.FdGrowth(), record.peak.fds);
  }
  return text;
}

}  // namespace tocl::testing
