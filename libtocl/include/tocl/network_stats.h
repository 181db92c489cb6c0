// Per-network statistics of a process (Runtime::NetworkStats), as reported
// to its daemon for `tocl networks` (DirectoryClient::NetworkStats).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tocl/gid.h"

namespace tocl {

// What one network knows about one destination process.
struct NetworkPeerStats {
  Gid peer;                       // a process
  double bandwidth = 0;           // bytes/s learned from fragment acknowledgements; 0: unknown
  uint64_t fragments_sent = 0;    // long-message fragments posted to this peer
  uint64_t fragments_resent = 0;  // of those, sent again after another network failed
  bool failed = false;            // failed for the peer, not tried again yet
};

// One network (one subsystem instance) of a process.
struct NetworkStats {
  std::string name;          // "shm", "tcp", "tcp-1": unique in the process, as published
  std::string kind;          // "shm", "tcp"
  std::string device;        // the interface a tcp network is bound to ("eth0"), empty for shm
  std::string address;       // what the process published in the directory
  uint64_t frames_sent = 0;  // every frame: short messages, fragments, control
  uint64_t bytes_sent = 0;   // header included
  uint64_t frames_received = 0;
  uint64_t bytes_received = 0;
  uint64_t failures = 0;                // peers this network stopped reaching mid-message
  std::vector<NetworkPeerStats> peers;  // destinations of long messages, busiest first
};

// What one report may hold (ProcessSession::ReportNetworkStats refuses more
// networks or strings out of bounds and leaves out peers past the limit; the
// daemon ignores a report over them).
inline constexpr size_t kMaxNetworksPerReport = 16;
inline constexpr size_t kMaxNetworkPeersPerReport = 64;  // per network; the rest are left out
inline constexpr size_t kMaxNetworkNameBytes = 32;       // name and kind: 1..32 bytes
inline constexpr size_t kMaxNetworkDeviceBytes = 64;     // 0..64 bytes
inline constexpr size_t kMaxNetworkAddressBytes = 1024;  // 0..1024 bytes, as an endpoint's

// The latest report of one process, as its daemon keeps it.
struct ProcessNetworkStats {
  Gid process;
  std::chrono::system_clock::time_point reported_at;
  std::vector<NetworkStats> networks;
};

}  // namespace tocl
