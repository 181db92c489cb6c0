#include "pool_table.h"

#include <fmt/format.h>

#include <array>

namespace tocl::cli {

std::string FormatBytes(uint64_t bytes) {
  constexpr std::array<char, 6> kUnits = {'K', 'M', 'G', 'T', 'P', 'E'};
  if (bytes < 1024) return fmt::format("{}", bytes);
  size_t unit = 0;
  uint64_t scale = 1024;
  while (unit + 1 < kUnits.size() && bytes / scale >= 1024) {
    scale *= 1024;
    ++unit;
  }
  if (bytes % scale == 0) return fmt::format("{}{}", bytes / scale, kUnits[unit]);
  const double value = static_cast<double>(bytes) / static_cast<double>(scale);
  if (value < 10) return fmt::format("{:.1f}{}", value, kUnits[unit]);
  return fmt::format("{:.0f}{}", value, kUnits[unit]);
}

Table PoolTable(std::span<const ProcessPoolStats> processes) {
  Table table({"PROCESS", "NETWORK", "CLASS", "IN_USE", "FREE", "PROVIDED", "GROWN", "REGISTERED"});
  for (const ProcessPoolStats& process : processes) {
    for (const PoolClassStats& stats : process.classes) {
      table.AddRow({process.process.ToString(), stats.network, FormatBytes(stats.class_bytes),
                    fmt::format("{}", stats.in_use), fmt::format("{}", stats.free),
                    fmt::format("{}", stats.provided), fmt::format("{}", stats.grown),
                    FormatBytes(stats.bytes_registered)});
    }
  }
  return table;
}

}  // namespace tocl::cli
