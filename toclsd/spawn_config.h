// The [spawn] table and socket_group of toclsd's configuration: reading
// them from TOML and printing them (config.cc calls these; the checks are
// FinishSpawnConfig in config.h).
#pragma once

#include <toml++/toml.h>

#include <string_view>

#include "config.h"
#include "tocl/status.h"

namespace tocl::daemon {

// Reads `[spawn]` (allow, run_as, run_as_group, log_max_bytes) and `socket_group` from
// `root` into `config`. Unknown keys in [spawn] and wrong types are errors
// naming the key and line.
Status ReadSpawnSettings(const toml::table& root, std::string_view source, DaemonConfig& config);

// Adds socket_group and a [spawn] table to `out` (--print-config).
void PrintSpawnSettings(const DaemonConfig& config, toml::table& out);

}  // namespace tocl::daemon
