// `tocl networks` as tables for people: the networks of each process with
// their traffic, then what each network knows about each destination.
//
//   PROCESS  NETWORK  KIND  DEVICE  ADDRESS         FRAMES_SENT  BYTES_SENT  ...
//   h1.p2    tcp.0    tcp   eth0    10.0.0.1:41234  1204         1.1G        ...
//
//   PROCESS  NETWORK  PEER   BANDWIDTH   FRAGMENTS  RESENT  FAILED
//   h1.p2    tcp.0    h2.p5  812.4 MB/s  1024       0       no
//
// and, for via networks, their VI pools: one row per network, then one per VI.
//
//   PROCESS  NETWORK  PROVIDER  VI_CAP  OPENED  CLOSED
//   h1.p2    via.0    sockets   64      5       3
//
//   PROCESS  NETWORK  PEER   CLASS   STATE      POSTED  CREDITS  QUEUED  SENT  RECEIVED
//   h1.p2    via.0    h1.p3  256 B   connected  64      60       0       10    12
//
// Pure functions: safe to call from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "support/table.h"
#include "tocl/network_stats.h"

namespace tocl::cli {

// Bytes per second in decimal units, as link speeds are given: "950 B/s",
// "12.5 kB/s", "812.4 MB/s", "1.2 GB/s"; "unknown" for 0 (not measured yet).
std::string FormatBandwidth(double bytes_per_second);

// One row per (process, network), processes in the given order and each
// one's networks in the order it reported them.
Table NetworkTable(std::span<const ProcessNetworkStats> processes);

// One row per (process, network, peer), in the order reported (most recent
// peer first).
Table NetworkPeerTable(std::span<const ProcessNetworkStats> processes);

// Whether `network` is a via network, whose VI pool is shown: its kind is
// "via", or it reported via fields (a provider or VIs).
bool HasViPool(const NetworkStats& network);

// A VI's size class in binary units: "256 B", "64 KiB", "1 MiB" (exact
// bytes, "300 B", when it is not a whole number of the unit).
std::string FormatViClass(uint32_t class_bytes);

// One row per (process, via network): its provider, its VI cap, and the VIs
// opened and closed (for the cap) since it started.
Table ViPoolTable(std::span<const ProcessNetworkStats> processes);

// One row per (process, via network, VI), in the order reported (most
// recently used first).
Table ViTable(std::span<const ProcessNetworkStats> processes);

}  // namespace tocl::cli
