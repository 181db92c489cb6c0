#include "report.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>

namespace tocl::bench {

bool Target::MetBy(double value, std::optional<double> ratio) const {
  double measured = value;
  if (applies == Applies::kRatio) {
    if (!ratio) return false;
    measured = *ratio;
  }
  return bound == Bound::kAtLeast ? measured >= limit : measured <= limit;
}

std::string Target::ToString() const {
  return fmt::format("{}{} {}", applies == Applies::kRatio ? "ratio " : "",
                     bound == Bound::kAtLeast ? ">=" : "<=", FormatNumber(limit));
}

std::string FormatNumber(double value) {
  double magnitude = std::fabs(value);
  if (magnitude >= 100 || value == 0) return fmt::format("{:.0f}", value);
  if (magnitude >= 10) return fmt::format("{:.1f}", value);
  if (magnitude >= 1) return fmt::format("{:.2f}", value);
  return fmt::format("{:.3f}", value);
}

Figure& Report::Add(std::string case_name, std::string metric, double value, std::string unit) {
  Figure& figure = figures_.emplace_back();
  figure.case_name = std::move(case_name);
  figure.metric = std::move(metric);
  figure.value = value;
  figure.unit = std::move(unit);
  return figure;
}

bool Report::AllTargetsMet() const {
  return std::all_of(figures_.begin(), figures_.end(), [](const Figure& figure) {
    return !figure.target || figure.target->MetBy(figure.value, figure.ratio);
  });
}

void Report::PrintTable(std::FILE* out) const {
  constexpr size_t kColumns = 9;
  using Row = std::array<std::string, kColumns>;
  std::vector<Row> rows;
  rows.push_back({"case", "metric", "value", "unit", "baseline", "ratio", "target", "met", "note"});
  for (const Figure& figure : figures_) {
    std::string met;
    std::string target;
    if (figure.target) {
      target = figure.target->ToString();
      met = figure.target->MetBy(figure.value, figure.ratio) ? "yes" : "NO";
    }
    rows.push_back({figure.case_name, figure.metric, FormatNumber(figure.value), figure.unit,
                    figure.baseline ? FormatNumber(*figure.baseline) : "-",
                    figure.ratio ? FormatNumber(*figure.ratio) : "-", target, met, figure.note});
  }
  std::array<size_t, kColumns> width{};
  for (const Row& row : rows) {
    for (size_t i = 0; i < kColumns; ++i) width[i] = std::max(width[i], row[i].size());
  }
  // Numbers are right-aligned so that their digits line up.
  constexpr std::array<bool, kColumns> kRight = {false, false, true,  false, true,
                                                 true,  false, false, false};
  fmt::print(out, "suite {}\n", suite_);
  for (const Row& row : rows) {
    std::string line;
    for (size_t i = 0; i < kColumns; ++i) {
      if (i + 1 == kColumns) {
        line += row[i];
      } else if (kRight[i]) {
        line += fmt::format("{:>{}}  ", row[i], width[i]);
      } else {
        line += fmt::format("{:<{}}  ", row[i], width[i]);
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    fmt::print(out, "{}\n", line);
  }
  std::fflush(out);
}

void Report::PrintJsonLines(std::FILE* out) const {
  for (const Figure& figure : figures_) {
    nlohmann::ordered_json line;
    line["suite"] = suite_;
    line["case"] = figure.case_name;
    line["metric"] = figure.metric;
    line["value"] = figure.value;
    line["unit"] = figure.unit;
    line["baseline"] = figure.baseline ? nlohmann::ordered_json(*figure.baseline) : nullptr;
    line["ratio"] = figure.ratio ? nlohmann::ordered_json(*figure.ratio) : nullptr;
    fmt::print(out, "{}\n", line.dump());
  }
  std::fflush(out);
}

}  // namespace tocl::bench
