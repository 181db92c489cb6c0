// Receive lanes: a process's threads fall into kReceiveLanes groups by
// thread index, and each group receives its short messages on rings of its
// own (shm: one per lane in each channel), drained by one thread at a time:
// the lane's own receiver when it polls, else the process's poller. So N
// receiving threads do not all wait on one poller, and a sender's threads
// posting to different lanes do not wait on each other (MPICH's VCIs, UCX's
// worker per thread). Sender and receiver must agree on the grouping: it is
// part of the protocol.
#pragma once

#include <cstdint>

#include "tocl/gid.h"

namespace tocl::wire {

inline constexpr uint32_t kReceiveLanes = 8;

inline uint32_t LaneOf(Gid thread) {
  return thread.thread_index() % kReceiveLanes;
}

}  // namespace tocl::wire
