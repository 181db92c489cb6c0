// `tocl --json` output: one JSON object per entity or change event, one per
// line (JSON Lines). The fields are documented in tools/README.md:
//
//   {"gid":"h1.p2","kind":"process","name":"indexer-0","state":"running",
//    "pid":41873,"attributes":{"role":"indexer"},"endpoints":[{"subsystem":
//    "tcp","address":"3132372e..."}],"started_at":"2024-05-01T12:34:56.123456Z",
//    "exited_at":null,"exit_reason":""}
//
// Pure functions: safe to call from any thread.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>

#include "tocl/entity.h"
#include "tocl/network_stats.h"
#include "tocl/pool_stats.h"

namespace tocl::cli {

nlohmann::json EntityToJson(const Entity& entity);

// The entity's fields (as it was when the event was sent) plus "seq", "op"
// and "at".
nlohmann::json ChangeEventToJson(const ChangeEvent& event);

// One process's pool statistics (`tocl pools --json`): "process",
// "reported_at" and "classes", an array of objects with "network",
// "class_bytes", "in_use", "free", "provided", "grown", "bytes_registered"
// (exact numbers).
nlohmann::json PoolStatsToJson(const ProcessPoolStats& stats);

// One process's network statistics (`tocl networks --json`): "process",
// "reported_at" and "networks", an array of objects with "name", "kind",
// "device", "address" (lower-case hex), "frames_sent", "bytes_sent",
// "frames_received", "bytes_received", "failures", "peers", an array of
// {"peer", "bandwidth" (bytes/s, null when unknown), "fragments_sent",
// "fragments_resent", "failed"}, then the via fields: "provider", "vi_cap",
// "vis_opened", "vis_closed" and "vis", an array of {"peer", "class_bytes",
// "state", "posted", "credits", "queued", "sent", "received"}. Every network
// has them ("", 0 and [] outside via networks) so that every object has the
// same keys.
nlohmann::json NetworkStatsToJson(const ProcessNetworkStats& stats);

// Writes `value` on one line to `out`. Invalid UTF-8 in names or values is
// replaced by U+FFFD rather than failing.
void PrintJsonLine(const nlohmann::json& value, std::FILE* out = stdout);

}  // namespace tocl::cli
