// Buffer-pool statistics, as a process reports them (Runtime::PoolStats) and
// as the daemon keeps them for `tocl pools` (DirectoryClient::PoolStats).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tocl/gid.h"

namespace tocl {

// One size class of one network's pool.
struct PoolClassStats {
  std::string network;            // "shm", "tcp"
  uint64_t class_bytes = 0;       // 2^y, header included
  uint64_t in_use = 0;            // held by the application, queued or in flight
  uint64_t free = 0;              // in the pool, ready for GetBuffer
  uint64_t provided = 0;          // provided to the network for receives
  uint64_t grown = 0;             // slabs added since the process started
  uint64_t bytes_registered = 0;  // slab memory registered with the network
};

// What one report may hold (ProcessSession::ReportPoolStats refuses more;
// the daemon ignores a report over them).
inline constexpr size_t kMaxPoolClassesPerReport = 64;
inline constexpr size_t kMaxPoolNetworkBytes = 32;  // network names are 1..32 bytes

// The latest report of one process, as its daemon keeps it.
struct ProcessPoolStats {
  Gid process;
  std::chrono::system_clock::time_point reported_at;  // when the daemon received it
  std::vector<PoolClassStats> classes;                // as the process sent them
};

}  // namespace tocl
