// When toclsd accepted each unix connection it handed to gRPC, by the
// connection's descriptor (the N of its calls' peer "fd:N", caller.h).
//
// On a kernel without SO_PEERPIDFD (before Linux 6.5: Debian 12's 6.1) the
// daemon can pin the process that connected only by pidfd_open(pid), and
// by then that process may have exited and its pid gone to another. A
// process that started after its connection was accepted cannot be the one
// that connected: the accept time tells them apart (PinProcessStartedBy).
//
// The time of descriptor N is recorded before N is handed to gRPC, which
// keeps N as that connection until its last call is over (caller.h): while
// a call on N runs, the time recorded for N is its connection's.
//
// Thread-safe: the accept thread records, gRPC handlers read.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace tocl::directory {

// CLOCK_BOOTTIME in nanoseconds: the clock /proc/<pid>/stat's start times
// count from (in ticks).
int64_t BootTimeNs();
// Nanoseconds per clock tick (sysconf(_SC_CLK_TCK)).
int64_t NsPerTick();
// Clock ticks since boot of a BootTimeNs time, rounded down as the kernel
// rounds a process's start time in /proc/<pid>/stat.
uint64_t BootTicks(int64_t boot_ns);

class AcceptTimes {
 public:
  // Connection `fd` was accepted now (call after accept returned).
  void Accepted(int fd);
  // When connection `fd` was accepted (BootTimeNs); nullopt when it was
  // never recorded.
  std::optional<int64_t> AcceptedAt(int fd) const;

 private:
  mutable std::mutex mu_;
  // Descriptor -> boot time. An entry is overwritten when its number is
  // accepted again; at most one per descriptor number the daemon may have.
  std::unordered_map<int, int64_t> accepted_ns_;  // guarded by mu_
};

}  // namespace tocl::directory
