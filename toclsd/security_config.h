// The security part of toclsd's configuration (issue #7 §1): the host's
// cluster credentials (`credentials = "DIR"`, --credentials DIR), and the
// rule that a daemon without them is reachable from this host only.
//
// With credentials, gRPC over TCP is mutual TLS (the listener, channels to
// other daemons) and processes get the data-plane secret at enrollment.
// Without, every TCP address the daemon listens on, advertises or joins
// must be loopback (127.0.0.0/8, ::1, localhost): a wildcard or another
// host's address is refused, naming the fix, since anyone who reached the
// port could spawn processes.
#pragma once

#include <optional>
#include <string_view>

#include "config.h"
#include "security/credentials.h"
#include "tocl/status.h"

namespace tocl::daemon {

// Whether the host part of "HOST:PORT" is loopback: 127.0.0.0/8, ::1 (also
// in brackets or v4-mapped) or "localhost". A wildcard (0.0.0.0, [::]) is
// not.
bool IsLoopbackAddress(std::string_view address);

// The part of FinishConfig that checks the rule above (after the join list
// is split). Ok with credentials configured.
Status FinishSecurityConfig(const DaemonConfig& config);

// Loads the credentials `config` names (errors name the file and what to
// do), or nullopt without, after logging once, at warn level, that the
// daemon stays on loopback.
Result<std::optional<security::Credentials>> LoadDaemonCredentials(const DaemonConfig& config);

}  // namespace tocl::daemon
