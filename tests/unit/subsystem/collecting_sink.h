// What the subsystem tests share: a payload checksum carried in the tag,
// and a Sink that collects what arrives (on the polling thread) for the
// test thread to read.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "buffers/buffer_pool.h"
#include "buffers/buffer_slot.h"
#include "subsystem/subsystem.h"
#include "wire/frame.h"
#include "wire/lanes.h"

namespace tocl::subsystem::testing {

inline uint32_t Checksum(std::span<const std::byte> bytes) {
  uint32_t hash = 2166136261u;  // FNV-1a
  for (std::byte b : bytes) hash = (hash ^ std::to_integer<uint32_t>(b)) * 16777619u;
  return hash;
}

struct Arrival {
  Gid from;
  wire::Header header;
  bool intact = false;                 // the payload matches the checksum in the tag
  detail::BufferSlot* slot = nullptr;  // when the sink keeps what arrives
  std::thread::id by;                  // the thread that delivered it
};

class CollectingSink final : public Sink {
 public:
  Status OnMessage(Gid from, buffers::SlotRef slot) override {
    Arrival arrival{from, slot->header(), false, nullptr, std::this_thread::get_id()};
    arrival.intact = Checksum({slot->payload(), slot->header().length}) == slot->header().tag;
    if (keep.load()) arrival.slot = slot.release();  // dropped by ReleaseKept
    std::lock_guard lock(mu_);
    arrivals_.push_back(arrival);
    return Status::Ok();
  }
  bool Congested() const override { return congested.load(); }
  void OnRouteDown(Gid /*peer_process*/) override { routes_down.fetch_add(1); }
  bool TryEnterLane(uint32_t lane) override { return lanes_[lane].try_lock(); }
  void EnterLane(uint32_t lane) override { lanes_[lane].lock(); }
  void LeaveLane(uint32_t lane) override { lanes_[lane].unlock(); }

  size_t size() const {
    std::lock_guard lock(mu_);
    return arrivals_.size();
  }
  std::vector<Arrival> arrivals() const {
    std::lock_guard lock(mu_);
    return arrivals_;
  }
  // Gives back the buffers kept while `keep` was set.
  void ReleaseKept() {
    std::lock_guard lock(mu_);
    for (Arrival& arrival : arrivals_) {
      if (arrival.slot != nullptr) arrival.slot->pool->Unref(std::exchange(arrival.slot, nullptr));
    }
  }

  std::atomic<bool> congested{false};
  std::atomic<bool> keep{false};
  std::atomic<int> routes_down{0};  // OnRouteDown calls

 private:
  mutable std::mutex mu_;
  std::vector<Arrival> arrivals_;
  std::mutex lanes_[wire::kReceiveLanes];
};

}  // namespace tocl::subsystem::testing
