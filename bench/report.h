// The figures of one benchmark run: an aligned table for people, and one
// JSON object per line for machines.
//
//   Report report("directory");
//   report.Add("lookup vs ping", "p50", 41.2, "us")
//       .WithBaseline(30.1)
//       .WithRatio(1.37)
//       .WithTarget({Target::Bound::kAtMost, 1.5, Target::Applies::kRatio});
//   report.PrintTable(stdout);
//
// Every JSON line has exactly the keys suite, case, metric, value, unit,
// baseline and ratio (baseline and ratio are null when a figure has none).
// Targets and notes appear only in the table.
//
// Not thread-safe: fill it from one thread.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace tocl::bench {

// What a figure should reach, e.g. value >= 200,000/s or ratio <= 1.5.
struct Target {
  enum class Bound { kAtLeast, kAtMost };
  enum class Applies { kValue, kRatio };
  Bound bound = Bound::kAtLeast;
  double limit = 0;
  Applies applies = Applies::kValue;

  // False when the target applies to a ratio the figure does not have.
  bool MetBy(double value, std::optional<double> ratio) const;
  std::string ToString() const;  // ">= 200000", "ratio <= 1.5"
};

struct Figure {
  std::string case_name;
  std::string metric;
  double value = 0;
  std::string unit;
  std::optional<double> baseline;  // the same quantity for the reference
  std::optional<double> ratio;     // value / baseline, or a median of such ratios
  std::optional<Target> target;
  std::string note;  // how it was measured (sample counts, ...): table only

  Figure& WithBaseline(double reference) {
    baseline = reference;
    return *this;
  }
  Figure& WithRatio(double measured_over_reference) {
    ratio = measured_over_reference;
    return *this;
  }
  Figure& WithTarget(Target goal) {
    target = goal;
    return *this;
  }
  Figure& WithNote(std::string text) {
    note = std::move(text);
    return *this;
  }
};

class Report {
 public:
  explicit Report(std::string suite) : suite_(std::move(suite)) {}

  // Appends a figure; the reference is for filling in its optional parts
  // and is valid until the next Add.
  Figure& Add(std::string case_name, std::string metric, double value, std::string unit);
  const std::vector<Figure>& figures() const { return figures_; }

  // True when every figure with a target meets it.
  bool AllTargetsMet() const;

  void PrintTable(std::FILE* out) const;
  void PrintJsonLines(std::FILE* out) const;

 private:
  std::string suite_;
  std::vector<Figure> figures_;
};

// Three significant figures for small numbers, whole numbers from 100 up.
std::string FormatNumber(double value);

}  // namespace tocl::bench
