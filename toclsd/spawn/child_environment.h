// The environment of a spawned program: the daemon's own, without its
// TOCL_* variables (they describe the daemon's parent, not the child), plus
// the child's identity, plus what the request asks for.
#pragma once

#include <google/protobuf/repeated_field.h>

#include <string>
#include <vector>

#include "tocl/gid.h"
#include "tocl/status.h"

namespace tocl::daemon::spawn {

// What the daemon tells the program it spawns: where to enroll, and the
// process row it enrolls into (libtocl reads these when it enrolls).
struct SpawnIdentity {
  std::string daemon;  // "unix:/var/lib/tocl/toclsd.sock" -> TOCL_DAEMON
  Gid gid;             // TOCL_PROCESS_GID
  std::string token;   // the session token, hex-encoded as TOCL_SPAWN_TOKEN
  Gid parent;          // TOCL_PARENT ("" when none)
};

// Checks a request's "KEY=VALUE" entries: InvalidArgument naming the entry
// for a missing '=', a key that is not [A-Za-z_][A-Za-z0-9_]*, a NUL byte, a
// key given twice, or a key the daemon sets (TOCL_DAEMON, TOCL_PROCESS_GID,
// TOCL_SPAWN_TOKEN, TOCL_PARENT).
Status ValidateEnvEntries(const google::protobuf::RepeatedPtrField<std::string>& entries);

// The child's environment; `entries` must have passed ValidateEnvEntries.
std::vector<std::string> ChildEnvironment(
    const char* const* inherited, const SpawnIdentity& identity,
    const google::protobuf::RepeatedPtrField<std::string>& entries);

std::string HexEncode(std::string_view bytes);

}  // namespace tocl::daemon::spawn
