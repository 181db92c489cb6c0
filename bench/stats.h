// Order statistics over samples: the numbers a benchmark reports.
//
// Plain functions over a copy of the samples (they sort it); an empty input
// gives 0, so a report never reads an uninitialised figure.
#pragma once

#include <cstddef>
#include <vector>

namespace tocl::bench {

// The p-th percentile (0 <= p <= 100), linearly interpolated between the
// two nearest ranks: Percentile(x, 50) is the median.
double Percentile(std::vector<double> samples, double p);
double Median(std::vector<double> samples);
double Min(const std::vector<double>& samples);
double Max(const std::vector<double>& samples);

// What a latency figure needs from one set of samples.
struct Summary {
  size_t count = 0;
  double min = 0;
  double p50 = 0;
  double p99 = 0;
  double max = 0;
};
Summary Summarize(std::vector<double> samples);

}  // namespace tocl::bench
