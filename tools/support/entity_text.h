// Directory entities as text for people: the tables `tocl` and `tocl-demo`
// print, and the formats of their cells.
//
//   tocl::cli::ProcessTable(processes).Print();
//
// Pure functions: safe to call from any thread.
#pragma once

#include <chrono>
#include <span>
#include <string>
#include <string_view>

#include "support/table.h"
#include "tocl/entity.h"

namespace tocl::cli {

// ISO-8601 UTC: "2024-05-01T12:34:56Z", or with `micros`
// "2024-05-01T12:34:56.123456Z".
std::string FormatUtcTime(std::chrono::system_clock::time_point time, bool micros = false);

// "role=indexer,shard=1" (keys in order); "" when there are none.
std::string FormatAttributes(const Attributes& attributes);

// Lower-case hex of `bytes`, two digits per byte.
std::string HexEncode(std::string_view bytes);

// An endpoint address for people: as text when every byte is printable
// ASCII, else "0x" and its hex.
std::string FormatEndpointAddress(std::string_view address);

// One row per entity, in the given order.
Table HostTable(std::span<const Entity> hosts);         // GID NAME STATE STARTED ATTRIBUTES
Table ProcessTable(std::span<const Entity> processes);  // GID NAME PID STATE STARTED ATTRIBUTES
Table ThreadTable(std::span<const Entity> threads);     // GID NAME STATE STARTED ATTRIBUTES
Table EntityTable(std::span<const Entity> entities);  // GID KIND NAME PID STATE STARTED ATTRIBUTES

// Everything known about one entity, one FIELD/VALUE row per fact (one row
// per attribute and per endpoint).
Table EntityDetailTable(const Entity& entity);

}  // namespace tocl::cli
