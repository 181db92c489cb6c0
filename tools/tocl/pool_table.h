// `tocl pools` as a table for people:
//
//   PROCESS  NETWORK  CLASS  IN_USE  FREE  PROVIDED  GROWN  REGISTERED
//   h1.p2    shm      64K    3       61    0         1     4M
//
// Pure functions: safe to call from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "support/table.h"
#include "tocl/pool_stats.h"

namespace tocl::cli {

// A byte count in binary units, as `ls -h` shows it: "512", "64K", "1.5M",
// "12G" (one decimal below 10 when not exact).
std::string FormatBytes(uint64_t bytes);

// One row per (process, network, class), processes in the given order and
// each one's classes in the order it reported them.
Table PoolTable(std::span<const ProcessPoolStats> processes);

}  // namespace tocl::cli
