#include "runtime/receive_lanes.h"

#include <algorithm>
#include <cassert>
#include <thread>
#include <utility>

namespace tocl::runtime {

namespace {

// The lane this thread holds (of which runtime's lanes), if any.
struct HeldLane {
  const ReceiveLanes* owner = nullptr;
  uint32_t lane = 0;
};
thread_local HeldLane held;

}  // namespace

ReceiveLanes::ReceiveLanes(size_t process_cap, std::atomic<size_t>& unexpected_bytes,
                           const PairOrder::Deliver& deliver, const PairOrder::Refill& refill,
                           PairOrder::Clock::duration carrier_grace) {
  const size_t lane_cap = std::max<size_t>(process_cap / wire::kReceiveLanes, 1);
  for (auto& lane : lanes_) {
    lane = std::make_unique<Lane>(
        lane_cap, unexpected_bytes, deliver,
        [this](Gid from_process) {
          std::lock_guard lock(broken_mu_);
          broken_.push_back(from_process);
          any_broken_.store(true, std::memory_order_release);
        },
        refill, carrier_grace);
  }
}

bool ReceiveLanes::TryEnter(uint32_t lane) {
  assert(held.owner == nullptr);  // one lane at a time
  Lane& l = *lanes_[lane];
  // A look first: a held lane costs no write to its cache line.
  if (l.busy.load(std::memory_order_relaxed) || l.busy.exchange(true, std::memory_order_acquire)) {
    return false;
  }
  held = HeldLane{this, lane};
  return true;
}

void ReceiveLanes::Enter(uint32_t lane) {
  // Holders hold a lane for one drain or one delivery: yield the CPU to one
  // that was preempted rather than sleep.
  while (!TryEnter(lane)) std::this_thread::yield();
}

void ReceiveLanes::Leave(uint32_t lane) {
  held = HeldLane{};
  lanes_[lane]->busy.store(false, std::memory_order_release);
}

bool ReceiveLanes::HeldByThisThread(uint32_t lane) const {
  return held.owner == this && held.lane == lane;
}

uint32_t ReceiveLanes::CounterOfThisThread() const {
  return held.owner == this ? held.lane + 1 : 0;
}

template <typename F>
auto ReceiveLanes::WithLane(uint32_t lane, F&& f) {
  Lane& l = *lanes_[lane];
  const bool enter = !HeldByThisThread(lane);
  if (enter) Enter(lane);
  auto result = f(l.order);
  NoteFills(l);
  if (enter) Leave(lane);
  return result;
}

void ReceiveLanes::NoteFills(Lane& lane) {
  const bool holds = lane.order.holds_fills();
  if (holds == lane.holds_fills) return;
  lane.holds_fills = holds;
  if (holds) {
    lanes_with_fills_.fetch_add(1, std::memory_order_relaxed);
  } else {
    lanes_with_fills_.fetch_sub(1, std::memory_order_relaxed);
  }
}

Status ReceiveLanes::OnOrdered(Gid from_process, buffers::SlotRef slot) {
  DropBroken();
  const uint32_t lane = wire::LaneOf(Gid::FromRaw(slot->header().destination));
  Status status = WithLane(
      lane, [&](PairOrder& order) { return order.OnOrdered(from_process, std::move(slot)); });
  // A sender found broken just now leaves the other lanes at once (unless
  // this thread holds a lane: then the next call holding none does it).
  if (!status.ok()) DropBroken();
  return status;
}

Status ReceiveLanes::Skip(Gid from_process, const LongKey& key, bool receiver_here) {
  DropBroken();
  return WithLane(wire::LaneOf(Gid::FromRaw(key.destination)),
                  [&](PairOrder& order) { return order.Skip(from_process, key, receiver_here); });
}

void ReceiveLanes::CarrierGone(Gid process) {
  DropBroken();
  const auto now = PairOrder::Clock::now();
  for (uint32_t lane = 0; lane < lanes_.size(); ++lane) {
    WithLane(lane, [&](PairOrder& order) {
      order.CarrierGone(process, now);
      return 0;
    });
  }
  any_gone_.store(true, std::memory_order_release);
}

void ReceiveLanes::Housekeeping(PairOrder::Clock::time_point now) {
  if (held.owner != nullptr) return;
  if (!any_gone_.load(std::memory_order_acquire) &&
      lanes_with_fills_.load(std::memory_order_relaxed) == 0) {
    return;
  }
  PairOrder::Clock::rep due = next_housekeeping_.load(std::memory_order_relaxed);
  const PairOrder::Clock::rep at = now.time_since_epoch().count();
  if (at < due || !next_housekeeping_.compare_exchange_strong(
                      due, (now + std::chrono::seconds(1)).time_since_epoch().count())) {
    return;
  }
  for (uint32_t lane = 0; lane < lanes_.size(); ++lane) {
    WithLane(lane, [&](PairOrder& order) {
      (void)order.Housekeeping(now);  // (its errors: of frames no network waits for)
      return 0;
    });
  }
}

size_t ReceiveLanes::Pairs() {
  size_t pairs = 0;
  for (uint32_t lane = 0; lane < lanes_.size(); ++lane) {
    pairs += WithLane(lane, [](PairOrder& order) { return order.pairs(); });
  }
  return pairs;
}

void ReceiveLanes::DropBroken() {
  if (!any_broken_.load(std::memory_order_acquire)) return;
  if (held.owner != nullptr) return;  // a holder enters no other lane
  std::vector<Gid> broken;
  {
    std::lock_guard lock(broken_mu_);
    broken.swap(broken_);
    any_broken_.store(false, std::memory_order_relaxed);
  }
  // Dropped, not exited: not gone as a carrier (PairOrder).
  for (uint32_t lane = 0; lane < lanes_.size(); ++lane) {
    WithLane(lane, [&](PairOrder& order) {
      for (Gid process : broken) order.DropProcess(process);
      return 0;
    });
  }
}

void ReceiveLanes::Clear() {
  for (uint32_t lane = 0; lane < lanes_.size(); ++lane) {
    WithLane(lane, [](PairOrder& order) {
      order.Clear();
      return 0;
    });
  }
}

size_t ReceiveLanes::HeldBytes(Gid from_process) {
  size_t bytes = 0;
  for (uint32_t lane = 0; lane < lanes_.size(); ++lane) {
    bytes += WithLane(lane, [&](PairOrder& order) { return order.HeldBytes(from_process); });
  }
  return bytes;
}

}  // namespace tocl::runtime
