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

// One VI of a via network's VI pool: the connection to one process for
// one size class (the ToCL paper's §4.2, DESIGN.md §5).
struct ViStats {
  Gid peer;                  // a process
  uint32_t class_bytes = 0;  // the size class: 256 B .. the short maximum
  std::string state;         // "connecting", "connected", "closing"
  uint32_t posted = 0;       // receive descriptors posted for the peer's messages
  uint32_t credits = 0;      // sends this process may still post (descriptors the peer posted)
  uint32_t queued = 0;       // sends waiting for credits or the connection
  uint64_t sent = 0;         // messages posted on this VI (control messages included)
  uint64_t received = 0;     // messages received on it (control messages included)
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
  // via only (empty otherwise):
  std::string provider;      // "sockets" or "ibverbs"
  uint32_t vi_cap = 0;       // the most VIs the process keeps open
  uint64_t vis_opened = 0;   // VIs connected since the start (both directions)
  uint64_t vis_closed = 0;   // VIs closed because the cap was reached (least recently used)
  std::vector<ViStats> vis;  // the VI pool, most recently used first
};

// What one report may hold (ProcessSession::ReportNetworkStats refuses more
// networks or strings out of bounds and leaves out peers past the limit; the
// daemon ignores a report over them).
inline constexpr size_t kMaxNetworksPerReport = 16;
inline constexpr size_t kMaxNetworkPeersPerReport = 64;  // per network; the rest are left out
inline constexpr size_t kMaxNetworkNameBytes = 32;       // name and kind: 1..32 bytes
inline constexpr size_t kMaxNetworkDeviceBytes = 64;     // 0..64 bytes
inline constexpr size_t kMaxNetworkAddressBytes = 1024;  // 0..1024 bytes, as an endpoint's
inline constexpr size_t kMaxVisPerReport = 256;          // per network; the rest are left out
inline constexpr size_t kMaxViStateBytes = 16;           // 1..16 bytes

// The latest report of one process, as its daemon keeps it.
struct ProcessNetworkStats {
  Gid process;
  std::chrono::system_clock::time_point reported_at;
  std::vector<NetworkStats> networks;
};

}  // namespace tocl
