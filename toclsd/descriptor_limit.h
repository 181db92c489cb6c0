// The daemon's budget of file descriptors. Each enrolled process costs it
// a unix connection and a pidfd, each spawned one a pidfd and two log
// files, each peer daemon a few sockets: a host's hundreds of processes
// outgrow the soft RLIMIT_NOFILE of 1024 that systemd and login shells
// give by default (kept low for select(2), which toclsd does not use).
// The hard limit is the administrator's (LimitNOFILE= in the unit); the
// soft one is raised to it at start.
#pragma once

#include <sys/resource.h>

#include "tocl/status.h"

namespace tocl::daemon {

// Raises this process's soft RLIMIT_NOFILE to its hard limit; the limits
// it then has. Children it starts inherit them.
Result<rlimit> RaiseDescriptorLimit();

}  // namespace tocl::daemon
