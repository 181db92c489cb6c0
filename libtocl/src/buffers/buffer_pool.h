// A pool of registered buffers for one network, in power-of-two size classes
// (the ToCL paper's §4.1: bfget / bfret / provide / reestablish).
//
// Memory comes in slabs from the network's SlabMemory (shm: carved from the
// process's shared segment; tcp: anonymous pages) and is registered once,
// per slab. A class that runs empty grows by one slab, as long as the
// process-wide PoolBudget allows; slabs are kept until the pool dies.
//
// Threading: every method is safe from any thread. Each class's free list is
// a lock-free stack (a get or a release is one compare-and-swap: they are
// on the path of every message); growing a class takes its mutex. The slot
// table is append-only and read lock-free.
#pragma once

#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "buffers/buffer_slot.h"
#include "buffers/size_class.h"
#include "tocl/buffer.h"
#include "tocl/pool_stats.h"
#include "tocl/status.h"

namespace tocl::buffers {

// The cap on all pool memory of a process, shared by its pools.
class PoolBudget {
 public:
  explicit PoolBudget(size_t cap) : cap_(cap) {}
  bool TryReserve(size_t bytes);
  void Unreserve(size_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }
  size_t cap() const { return cap_; }
  size_t used() const { return used_.load(std::memory_order_relaxed); }

  // GetBuffer(AtCap::kWait) sleeps here; a buffer going back to any pool
  // wakes the sleepers (it may be of the class they want). A getter that
  // found nothing registers (BeginWait), looks once more, then waits or
  // cancels. A release costs nobody anything while no one waits: it reads
  // `waiters_` after it pushed the buffer (both seq_cst), and a getter
  // counts itself before its second look at the list (both seq_cst): one
  // of the two sees the other. (Only a release of the getter's class can
  // help it: slabs are never freed.)
  uint64_t BeginWait();
  void CancelWait() { waiters_.fetch_sub(1, std::memory_order_relaxed); }
  // Ends the wait begun with BeginWait: false at the deadline.
  bool WaitForRelease(std::chrono::steady_clock::time_point deadline, uint64_t seen_epoch);
  void NotifyRelease();

 private:
  const size_t cap_;
  std::atomic<size_t> used_{0};
  uint64_t epoch_ = 0;  // guarded by mu_
  std::atomic<uint32_t> waiters_{0};
  std::mutex mu_;
  std::condition_variable cv_;
};

struct Slab {
  std::byte* base = nullptr;
  uint64_t offset = 0;      // of base in the network's memory (what peers are told)
  uint32_t memory_key = 0;  // the registration's key, copied into every slot
};

// Where a pool's slabs come from. Allocate is called with the pool's class
// mutex held; it must not call back into the pool.
class SlabMemory {
 public:
  virtual ~SlabMemory() = default;
  virtual Result<Slab> Allocate(size_t bytes) = 0;
};

// Anonymous private pages (tcp: the kernel copies from them).
class AnonymousSlabMemory final : public SlabMemory {
 public:
  ~AnonymousSlabMemory() override;
  Result<Slab> Allocate(size_t bytes) override;

 private:
  std::mutex mu_;
  std::vector<std::pair<void*, size_t>> maps_;
  uint64_t next_offset_ = 0;
};

class BufferPool {
 public:
  // Classes 0 .. num_classes-1 (256 B .. 256 B << (num_classes-1)).
  BufferPool(Network network, uint32_t num_classes, SlabMemory& memory, PoolBudget& budget);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  Network network() const { return network_; }
  uint32_t num_classes() const { return num_classes_; }

  // A free buffer of `class_index` with refs = 1, growing the class when it
  // is empty; nullptr when the budget is spent (or the slab memory failed).
  detail::BufferSlot* TryGet(uint32_t class_index);
  // Up to `count` buffers of one class (providing receive buffers in
  // batches); returns how many were written to `out`.
  size_t TryGetMany(uint32_t class_index, size_t count, detail::BufferSlot** out);
  // TryGet, or waits for a release until `deadline` (kWait) or fails at
  // once (kFail): ResourceExhausted / DeadlineExceeded name the cap.
  Result<detail::BufferSlot*> Get(uint32_t class_index, AtCap at_cap,
                                  std::chrono::steady_clock::time_point deadline);

  // Drops one reference; the last one puts the slot back on its free list.
  void Unref(detail::BufferSlot* slot);

  // A poller that found no buffer asks to be told of the next release:
  // `on_release` (set once, before any Get) runs on the releasing thread.
  // Ask, then TryGet once more: a release that the second look missed
  // comes after the ask (the release pushes, then reads the ask; the asker
  // stores, then reads the list: seq_cst both).
  void SetReleaseHook(std::function<void()> on_release) { on_release_ = std::move(on_release); }
  void WantRelease() { release_wanted_.store(true, std::memory_order_seq_cst); }

  // The slot with table index `index`, or nullptr when out of range (for
  // checking indexes that come from a peer).
  detail::BufferSlot* SlotAt(uint32_t index) const;

  // Buffers handed to the network for receives, for the statistics. Any
  // thread.
  void CountProvided(uint32_t class_index, int64_t delta);

  std::vector<PoolClassStats> Stats() const;

 private:
  struct SizeClass {
    // The free list's top: (generation << 32) | (table index + 1), 0 below
    // when empty. The generation changes with every push and pop, so a
    // getter that read a top which was taken and put back meanwhile fails
    // its compare-and-swap (ABA).
    std::atomic<uint64_t> free_top{0};
    std::mutex grow_mu;  // one grower per class
    std::atomic<uint64_t> total{0};
    std::atomic<int64_t> provided{0};
    std::atomic<uint64_t> grown{0};
    std::atomic<uint64_t> bytes_registered{0};
  };

  // A new slab for the class (grow_mu held): its slots, one array from
  // `first` to `last` linked in order, not yet on the free list, so that the grower gets the ones
  // it grew for (other getters do not take the list's lock). False when the budget is spent or the
  // slab memory failed.
  bool GrowLocked(uint32_t class_index, SizeClass& size_class, detail::BufferSlot*& first,
                  detail::BufferSlot*& last);
  detail::BufferSlot* Pop(SizeClass& size_class);
  // Pushes the chain first .. last (linked by next_free) in one step.
  void PushChain(SizeClass& size_class, detail::BufferSlot* first, detail::BufferSlot* last);
  void Put(detail::BufferSlot* slot);

  const Network network_;
  const uint32_t num_classes_;
  SlabMemory& memory_;
  PoolBudget& budget_;
  std::function<void()> on_release_;
  std::atomic<bool> release_wanted_{false};
  std::unique_ptr<SizeClass[]> classes_;

  // Slot table: entries [0, slot_count_) are set and never change. Mapped
  // lazily (MAP_NORESERVE) for the most slots the budget allows.
  detail::BufferSlot** table_ = nullptr;
  size_t table_capacity_ = 0;
  std::atomic<uint32_t> slot_count_{0};
  std::mutex grow_mu_;  // guards appending to the table and slot_storage_
  std::vector<std::unique_ptr<detail::BufferSlot[]>> slot_storage_;
};

}  // namespace tocl::buffers
