// The body of a peer process of `tocl-bench msg`: it answers the
// coordinator's commands (protocol.h) one at a time until kExit or until the
// control socket closes, then exits the process without returning (the
// coordinator's state, which the fork copied, is never unwound).
#pragma once

#include "protocol.h"
#include "shared_region.h"

namespace tocl::bench::msg {

[[noreturn]] void RunPeer(Role role, int control_fd, SharedLayout& shm, int tcp_fd);

}  // namespace tocl::bench::msg
