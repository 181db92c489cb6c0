// The send side of one destination process: its routes, the FIFO queue of
// frames its routes could not take yet, and the sequence numbers that let
// the receiver keep this process pair's order across networks.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>

#include "buffers/buffer_slot.h"
#include "subsystem/subsystem.h"
#include "tocl/gid.h"
#include "tocl/status.h"

namespace tocl::runtime {

struct SendPeer {
  explicit SendPeer(Gid process_gid) : process(process_gid) {}

  enum class State { kUnresolved, kReady, kFailed };

  struct Pending {
    detail::BufferSlot* slot;  // one reference, ours
    subsystem::Route* route;
  };

  const Gid process;
  std::mutex mu;
  std::condition_variable space;                // a sender waits here while the queue is full
  State state = State::kUnresolved;             // guarded by mu
  Status failure;                               // guarded by mu: why kFailed
  std::unique_ptr<subsystem::Route> routes[3];  // guarded by mu, by Network value
  subsystem::Route* default_route = nullptr;    // guarded by mu
  uint64_t next_seq = 0;                        // guarded by mu
  std::deque<Pending> queue;                    // guarded by mu
  bool listed_blocked = false;                  // guarded by mu
};

// What the sender knows of a destination thread.
struct DestThread {
  SendPeer* peer = nullptr;
  std::atomic<bool> exited{false};
};

}  // namespace tocl::runtime
