// The shm subsystem: messages between processes of one host through shared
// memory (DESIGN.md §5). A small frame travels inside its channel's arrival
// ring entry (segment_layout.h). Receive buffers for bigger ones live in the
// receiver's segment and are provided per sender and size class; a sender
// copies a frame into one and publishes it on its channel's arrival ring;
// the receiver hands the buffer to the application with no further copy.
// A sleeping receiver is
// woken through its bell (a FIFO next to the segment) watched by its epoll
// set, so one thread can sleep on shm and tcp at once.
//
// Lifetime of segments: created at Open, unlinked at Close. A process killed
// with -9 leaves its files behind; the next Open on the host (any process's)
// removes segments whose owner is gone (RemoveStaleSegments).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "subsystem/reactor.h"
#include "subsystem/subsystem.h"

namespace tocl::subsystem::shm {

struct ShmOptions {
  Gid self_process;
  uint32_t num_classes = 9;  // 256 B .. 64 KiB
  // Where segments live; the directory is shared by every process of the host.
  std::string directory = "/dev/shm";
};

// Removes segments (and bells) in `directory` whose owner process is gone.
// Returns how many were removed.
int RemoveStaleSegments(const std::string& directory);

class ShmSubsystem;
Result<std::unique_ptr<Subsystem>> OpenShm(const ShmOptions& options, Reactor& reactor, Sink& sink,
                                           buffers::PoolBudget& budget);

}  // namespace tocl::subsystem::shm
