// Acting as an unprivileged user from a test that runs as root: a forked
// child becomes nobody:nogroup (uid and gid 65534, no other groups), acts,
// and exits with the result.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>

namespace tocl::testing {

inline constexpr uid_t kNobodyUid = 65534;
inline constexpr gid_t kNogroupGid = 65534;

// Whether the test can switch users (it runs as root).
bool CanSwitchUsers();

// Runs `action` as nobody in a forked child and returns what it returned
// (0..125), 126 when the switch failed, 127 when the child died. The test
// process has threads: `action` may make only async-signal-safe calls.
int RunAsNobody(const std::function<int()>& action);

// connect(2) to the unix socket at `path` as nobody: 0, or the errno.
int ConnectAsNobody(const std::string& path);

}  // namespace tocl::testing
