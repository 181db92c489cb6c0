// The daemon's identity in its cluster: a random key kept in the state
// directory, which the seed maps to a host id (a restart keeps its id; a
// stranger that does not hold the key cannot take it).
#pragma once

#include <string>

#include "tocl/status.h"

namespace tocl::daemon::cluster {

inline constexpr size_t kNodeKeyChars = 32;  // hex

// Reads the key at `path`, or creates it (0600) when the file does not
// exist. A file that does not hold a key is an error naming it.
Result<std::string> LoadOrCreateNodeKey(const std::string& path);

// Whether `key` looks like a node key (32 lower-case hex digits).
bool IsNodeKey(std::string_view key);

}  // namespace tocl::daemon::cluster
