// The Unix identity spawned programs run as when the daemon runs as root
// (`[spawn] run_as` / `run_as_group`), and group lookups by name, resolved
// once at start (a user or group added later needs a restart).
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "tocl/status.h"

namespace tocl::daemon::spawn {

struct RunAs {
  std::string user;
  uid_t uid = 0;
  gid_t gid = 0;                 // run_as_group, else the user's primary group
  std::vector<gid_t> groups;     // supplementary groups, as initgroups(3) sets them
  std::string Describe() const;  // "nobody (uid 65534, gid 65534)"
};

// `user` and optional `group` (empty: the user's primary group), by name.
// NotFound "spawn run_as: no user 'x' on this host".
Result<RunAs> ResolveRunAs(std::string_view user, std::string_view group);

// A group's id by name; `what` names the setting in the error ("socket_group").
Result<gid_t> ResolveGroup(std::string_view group, std::string_view what);

// Whether `identity` has `gid` as its group or among its supplementary ones.
bool InGroup(const RunAs& identity, gid_t gid);

}  // namespace tocl::daemon::spawn
