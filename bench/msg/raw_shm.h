// The shared-memory baselines: what two processes get from a MAP_SHARED
// region and nothing else (shared_region.h).
//
// Every function runs one side of one run: the initiator measures and fills
// the result, the responder answers. Both sides must be called with the same
// spec. Errors: DeadlineExceeded when the other side stopped answering,
// DataLoss when a message came back wrong.
#pragma once

#include "run_spec.h"
#include "shared_region.h"
#include "tocl/status.h"

namespace tocl::bench::msg {

// Both sides spin on a sequence word; the payload (right behind the word)
// is copied from a private buffer into the shared slot and out again, both
// ways, as a message would be.
Status RawShmPingPong(Role role, SharedLayout& shm, const RunSpec& spec, LatencyResult* out);

// The same 8-byte exchange, but each side sleeps in FUTEX_WAIT until the
// other's FUTEX_WAKE: what a blocking receive costs with nothing in between.
Status RawFutexPingPong(Role role, SharedLayout& shm, const RunSpec& spec, LatencyResult* out);

// memcpy of spec.size bytes between two private buffers, in the initiator
// alone (the responder returns at once).
Status MemcpyStream(Role role, const RunSpec& spec, StreamResult* out);

// spec.pairs single-producer single-consumer rings of slots in the shared
// region: the sender copies each message into a slot and publishes it with
// the slot's sequence word; the receiver copies it out and tells the sender
// every few messages how far it got.
Status RawShmStream(Role role, SharedLayout& shm, const RunSpec& spec, StreamResult* out);

}  // namespace tocl::bench::msg
