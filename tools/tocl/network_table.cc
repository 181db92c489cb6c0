#include "network_table.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <string_view>

#include "pool_table.h"
#include "support/entity_text.h"

namespace tocl::cli {
namespace {

std::string OrDash(std::string text) {
  return text.empty() ? "-" : text;
}

}  // namespace

std::string FormatBandwidth(double bytes_per_second) {
  if (!(bytes_per_second > 0) || !std::isfinite(bytes_per_second)) return "unknown";
  constexpr std::array<std::string_view, 6> kUnits = {"B/s",  "kB/s", "MB/s",
                                                      "GB/s", "TB/s", "PB/s"};
  size_t unit = 0;
  double value = bytes_per_second;
  // Step up before rounding would print "1000 B/s" or "1000.0 kB/s".
  while (unit + 1 < kUnits.size() && value >= (unit == 0 ? 999.5 : 999.95)) {
    value /= 1000;
    ++unit;
  }
  if (unit == 0) return fmt::format("{:.0f} {}", value, kUnits[unit]);
  return fmt::format("{:.1f} {}", value, kUnits[unit]);
}

Table NetworkTable(std::span<const ProcessNetworkStats> processes) {
  Table table({"PROCESS", "NETWORK", "KIND", "DEVICE", "ADDRESS", "FRAMES_SENT", "BYTES_SENT",
               "FRAMES_RECV", "BYTES_RECV", "FAILURES"});
  for (const ProcessNetworkStats& process : processes) {
    for (const NetworkStats& network : process.networks) {
      table.AddRow({process.process.ToString(), network.name, network.kind, OrDash(network.device),
                    OrDash(FormatEndpointAddress(network.address)),
                    fmt::format("{}", network.frames_sent), FormatBytes(network.bytes_sent),
                    fmt::format("{}", network.frames_received), FormatBytes(network.bytes_received),
                    fmt::format("{}", network.failures)});
    }
  }
  return table;
}

Table NetworkPeerTable(std::span<const ProcessNetworkStats> processes) {
  Table table({"PROCESS", "NETWORK", "PEER", "BANDWIDTH", "FRAGMENTS", "RESENT", "FAILED"});
  for (const ProcessNetworkStats& process : processes) {
    for (const NetworkStats& network : process.networks) {
      for (const NetworkPeerStats& peer : network.peers) {
        table.AddRow({process.process.ToString(), network.name, peer.peer.ToString(),
                      FormatBandwidth(peer.bandwidth), fmt::format("{}", peer.fragments_sent),
                      fmt::format("{}", peer.fragments_resent), peer.failed ? "yes" : "no"});
      }
    }
  }
  return table;
}

bool HasViPool(const NetworkStats& network) {
  return network.kind == "via" || !network.provider.empty() || !network.vis.empty();
}

std::string FormatViClass(uint32_t class_bytes) {
  constexpr std::array<std::string_view, 3> kUnits = {"B", "KiB", "MiB"};
  size_t unit = 0;
  uint32_t value = class_bytes;
  while (unit + 1 < kUnits.size() && value >= 1024 && value % 1024 == 0) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{} {}", value, kUnits[unit]);
}

Table ViPoolTable(std::span<const ProcessNetworkStats> processes) {
  Table table({"PROCESS", "NETWORK", "PROVIDER", "VI_CAP", "OPENED", "CLOSED"});
  for (const ProcessNetworkStats& process : processes) {
    for (const NetworkStats& network : process.networks) {
      if (!HasViPool(network)) continue;
      table.AddRow({process.process.ToString(), network.name, OrDash(network.provider),
                    fmt::format("{}", network.vi_cap), fmt::format("{}", network.vis_opened),
                    fmt::format("{}", network.vis_closed)});
    }
  }
  return table;
}

Table ViTable(std::span<const ProcessNetworkStats> processes) {
  Table table({"PROCESS", "NETWORK", "PEER", "CLASS", "STATE", "POSTED", "CREDITS", "QUEUED",
               "SENT", "RECEIVED"});
  for (const ProcessNetworkStats& process : processes) {
    for (const NetworkStats& network : process.networks) {
      for (const ViStats& vi : network.vis) {
        table.AddRow({process.process.ToString(), network.name, vi.peer.ToString(),
                      FormatViClass(vi.class_bytes), vi.state, fmt::format("{}", vi.posted),
                      fmt::format("{}", vi.credits), fmt::format("{}", vi.queued),
                      fmt::format("{}", vi.sent), fmt::format("{}", vi.received)});
      }
    }
  }
  return table;
}

}  // namespace tocl::cli
