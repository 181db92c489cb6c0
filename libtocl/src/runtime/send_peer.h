// The send side of one destination process: a route per network that
// reaches it, the FIFO queue of frames its routes could not take yet, and
// the sequence numbers (per sending thread, receiving thread pair) that let
// the receiver keep each pair's order across networks.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "buffers/buffer_slot.h"
#include "buffers/slot_ref.h"
#include "subsystem/subsystem.h"
#include "tocl/gid.h"
#include "tocl/status.h"

namespace tocl::runtime {

// The key of a (sending thread, receiving thread) pair within one pair of
// processes: both thread indexes (24 bits each).
inline uint64_t ThreadPairKey(Gid from, Gid to) {
  return (uint64_t{from.thread_index()} << 24) | to.thread_index();
}

// One network's route to the peer, with what that network has shown.
struct PeerRail {
  int rail = -1;  // index of the network in Runtime::Impl::rails
  std::unique_ptr<subsystem::Route> route;
  uint64_t frames_sent = 0;
  uint64_t bytes_sent = 0;
  uint64_t fragments_sent = 0;
  uint64_t fragments_resent = 0;
  double bandwidth = 0;  // bytes/s learned from acknowledgements; 0 = unknown
  // Stopped acknowledging fragments (or broke): not used until retry_at.
  bool failed = false;
  std::chrono::steady_clock::time_point retry_at;
  uint64_t inflight_bytes = 0;  // fragments of every long send not yet acknowledged
};

struct SendPeer {
  explicit SendPeer(Gid process_gid) : process(process_gid) {}

  enum class State { kUnresolved, kReady, kFailed };

  struct Pending {
    buffers::SlotRef slot;  // one reference, ours
    int rail;               // index into rails
  };

  const Gid process;
  std::mutex mu;
  std::condition_variable space;     // a sender waits here while the queue is full
  State state = State::kUnresolved;  // guarded by mu
  Status failure;                    // guarded by mu: why kFailed
  std::vector<PeerRail> rails;       // guarded by mu; fixed once kReady
  int default_rail = -1;             // guarded by mu: short messages and control frames
  std::unordered_map<uint64_t, uint64_t> next_seq;  // guarded by mu, by ThreadPairKey
  std::deque<Pending> queue;                        // guarded by mu
  bool listed_blocked = false;                      // guarded by mu
  // Failed because its host went down (not because it exited): it is
  // resolved again when the host comes back.
  bool host_down = false;  // guarded by mu
  // Counts those resets: a long send that waited across one gives up (its
  // rail indexes are stale).
  uint64_t generation = 0;  // guarded by mu
};

// What the sender knows of a destination thread.
struct DestThread {
  SendPeer* peer = nullptr;
  std::atomic<bool> exited{false};
};

}  // namespace tocl::runtime
