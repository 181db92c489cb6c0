#include "stats.h"

#include <algorithm>
#include <cmath>

namespace tocl::bench {
namespace {

// `sorted` is in ascending order and not empty.
double SortedPercentile(const std::vector<double>& sorted, double p) {
  double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(sorted.size() - 1);
  auto below = static_cast<size_t>(std::floor(rank));
  size_t above = std::min(below + 1, sorted.size() - 1);
  double fraction = rank - static_cast<double>(below);
  return sorted[below] + (sorted[above] - sorted[below]) * fraction;
}

}  // namespace

double Percentile(std::vector<double> samples, double p) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  return SortedPercentile(samples, p);
}

double Median(std::vector<double> samples) {
  return Percentile(std::move(samples), 50);
}

double Min(const std::vector<double>& samples) {
  return samples.empty() ? 0 : *std::min_element(samples.begin(), samples.end());
}

double Max(const std::vector<double>& samples) {
  return samples.empty() ? 0 : *std::max_element(samples.begin(), samples.end());
}

Summary Summarize(std::vector<double> samples) {
  Summary summary;
  if (samples.empty()) return summary;
  std::sort(samples.begin(), samples.end());
  summary.count = samples.size();
  summary.min = samples.front();
  summary.p50 = SortedPercentile(samples, 50);
  summary.p99 = SortedPercentile(samples, 99);
  summary.max = samples.back();
  return summary;
}

}  // namespace tocl::bench
