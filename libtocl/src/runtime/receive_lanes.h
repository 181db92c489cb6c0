// The receive lanes of a process (wire/lanes.h): its threads in groups, each
// group with its own lock and its own share of the pair order, so that the
// short messages of different groups are drained and put in order by
// different threads at once: a receiver polling its own lane, the poller the
// others.
//
// A lane's lock is held by whoever drains that lane's rings (a subsystem,
// through Sink::TryEnterLane) and, briefly, by a delivery to one of its
// threads from elsewhere (tcp, the shm arrivals ring, via), which takes it
// here. The lane's PairOrder keeps the pairs whose receiving thread is in
// the lane; its frames are delivered with the lock held (the callback must
// not enter another lane).
//
// Memory: each lane holds at most process_cap / kReceiveLanes bytes for one
// sending process, so all of them together at most process_cap (as one
// PairOrder would). A sending process found broken in one lane is dropped
// from every lane: at once by a caller that holds no lane, else by the next
// call that holds none (a lane holder never waits for another lane).
//
// Threading: any thread; a thread holding a lane may call OnOrdered and Skip
// for that lane without waiting for itself. A thread holds at most one lane
// (of one runtime) at a time.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "buffers/slot_ref.h"
#include "runtime/long_message.h"
#include "runtime/pair_order.h"
#include "tocl/gid.h"
#include "tocl/status.h"
#include "wire/lanes.h"

namespace tocl::runtime {

class ReceiveLanes {
 public:
  // `carrier_grace`: PairOrder's (how long a gone carrier's fills are
  // still waited for).
  ReceiveLanes(size_t process_cap, std::atomic<size_t>& unexpected_bytes,
               const PairOrder::Deliver& deliver, const PairOrder::Refill& refill = {},
               PairOrder::Clock::duration carrier_grace = std::chrono::seconds(10));
  ReceiveLanes(const ReceiveLanes&) = delete;
  ReceiveLanes& operator=(const ReceiveLanes&) = delete;

  bool TryEnter(uint32_t lane);
  void Enter(uint32_t lane);
  void Leave(uint32_t lane);
  // 1 + the lane this thread holds, or 0 (a per-writer counter's index:
  // each lane has one holder at a time, the rest is the poller's).
  uint32_t CounterOfThisThread() const;

  // PairOrder::OnOrdered in the lane of the frame's receiving thread.
  Status OnOrdered(Gid from_process, buffers::SlotRef slot);
  // PairOrder::Skip in the lane of the message's receiving thread.
  Status Skip(Gid from_process, const LongKey& key, bool receiver_here = true);
  // PairOrder::CarrierGone in every lane (a process exited; not for one
  // only dropped: DropBroken).
  void CarrierGone(Gid process);
  // PairOrder::Housekeeping in every lane, at most once per second and only
  // while some lane holds fills (they age out) or once some carrier went
  // (the poller's round: cheap otherwise). Not while this thread holds a
  // lane.
  void Housekeeping(PairOrder::Clock::time_point now);
  // Pairs known in every lane (tests: state a peer's frames created).
  size_t Pairs();
  // Lanes counted as holding fills (tests: the count returns to 0).
  uint32_t lanes_with_fills() const { return lanes_with_fills_.load(std::memory_order_relaxed); }
  // Sending processes found broken are dropped from every lane (when this
  // thread holds none; else later). Also done by OnOrdered and Skip.
  void DropBroken();
  // Every lane's held frames dropped (the runtime goes away).
  void Clear();
  // Bytes held for `from_process`'s pairs, in every lane.
  size_t HeldBytes(Gid from_process);

 private:
  struct alignas(64) Lane {
    Lane(size_t process_cap, std::atomic<size_t>& unexpected_bytes,
         const PairOrder::Deliver& deliver, PairOrder::Broken broken,
         const PairOrder::Refill& refill, PairOrder::Clock::duration carrier_grace)
        : order(process_cap, unexpected_bytes, deliver, std::move(broken), refill, carrier_grace) {}
    std::atomic<bool> busy{false};  // the lock
    PairOrder order;                // guarded by busy
    bool holds_fills = false;       // guarded by busy: counted in lanes_with_fills_
  };

  bool HeldByThisThread(uint32_t lane) const;
  // Runs `f(order)` holding `lane` (already held by this thread, or taken
  // for the call).
  template <typename F>
  auto WithLane(uint32_t lane, F&& f);
  // Counts `lane` in lanes_with_fills_ while its order holds fills (its
  // holder calls it after each change).
  void NoteFills(Lane& lane);

  std::array<std::unique_ptr<Lane>, wire::kReceiveLanes> lanes_;
  std::mutex broken_mu_;
  std::vector<Gid> broken_;  // guarded by broken_mu_: to drop from every lane
  std::atomic<bool> any_broken_{false};
  // Some carrier exited: Housekeeping may have work. Never cleared, and
  // need not be: a marker naming a carrier that exited may come at any
  // time after (each lane remembers its last 1024 exits), and once set it
  // costs a lock and an empty-set look per lane once a second
  // (PairOrder::Housekeeping looks only at the pairs awaiting a fill).
  std::atomic<bool> any_gone_{false};
  // Lanes whose order holds fills: Housekeeping ages them out (else a fill
  // waited until some process exited). A hint only: each lane's state is
  // ordered by its lock (busy), so relaxed suffices, and a stale 0 delays
  // ageing to the next round. On a line of its own: a lane's holder
  // changes it as its order starts or stops holding fills, while any_broken_
  // is read on every OnOrdered from every lane.
  alignas(64) std::atomic<uint32_t> lanes_with_fills_{0};
  std::atomic<PairOrder::Clock::rep> next_housekeeping_{0};
};

}  // namespace tocl::runtime
