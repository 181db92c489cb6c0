#include "buffers/buffer_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "buffers/large_slot.h"
#include "core/logger.h"
#include "core/posix.h"

namespace tocl::buffers {

namespace {

// A slab holds at least 8 buffers and at least 64 KiB: few registrations,
// little waste for the big classes.
size_t SlabBytes(uint32_t class_index) {
  return std::max<size_t>(size_t{64} << 10, 8 * ClassBytes(class_index));
}

}  // namespace

bool PoolBudget::TryReserve(size_t bytes) {
  size_t used = used_.load(std::memory_order_relaxed);
  do {
    if (used + bytes > cap_) return false;
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return true;
}

uint64_t PoolBudget::BeginWait() {
  std::lock_guard lock(mu_);
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  return epoch_;
}

bool PoolBudget::WaitForRelease(std::chrono::steady_clock::time_point deadline,
                                uint64_t seen_epoch) {
  std::unique_lock lock(mu_);
  bool released = cv_.wait_until(lock, deadline, [&] { return epoch_ != seen_epoch; });
  waiters_.fetch_sub(1, std::memory_order_relaxed);
  return released;
}

void PoolBudget::NotifyRelease() {
  // Called after the buffer was pushed (seq_cst): a getter that registered
  // before is seen here, one that registered after finds the buffer when
  // it looks again.
  if (waiters_.load(std::memory_order_seq_cst) == 0) return;
  {
    std::lock_guard lock(mu_);
    ++epoch_;
  }
  cv_.notify_all();
}

AnonymousSlabMemory::~AnonymousSlabMemory() {
  for (auto [base, bytes] : maps_) munmap(base, bytes);
}

Result<Slab> AnonymousSlabMemory::Allocate(size_t bytes) {
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    return ErrnoStatus(fmt::format("mmap of a {} byte slab", bytes), errno);
  }
  std::lock_guard lock(mu_);
  maps_.emplace_back(base, bytes);
  Slab slab{static_cast<std::byte*>(base), next_offset_};
  next_offset_ += bytes;
  return slab;
}

BufferPool::BufferPool(Network network, uint32_t num_classes, SlabMemory& memory,
                       PoolBudget& budget)
    : network_(network),
      num_classes_(num_classes),
      memory_(memory),
      budget_(budget),
      classes_(std::make_unique<SizeClass[]>(num_classes)) {
  table_capacity_ = budget.cap() / ClassBytes(0) + 1;
  void* table = mmap(nullptr, table_capacity_ * sizeof(detail::BufferSlot*), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (table == MAP_FAILED) {
    // Without a table the pool cannot grow: every Get fails ResourceExhausted.
    Log().error("tocl: cannot map the buffer slot table: {}", std::strerror(errno));
    table_capacity_ = 0;
  } else {
    table_ = static_cast<detail::BufferSlot**>(table);
  }
}

BufferPool::~BufferPool() {
  if (table_ != nullptr) munmap(table_, table_capacity_ * sizeof(detail::BufferSlot*));
}

bool BufferPool::GrowLocked(uint32_t class_index, SizeClass& size_class,
                            detail::BufferSlot*& first_out, detail::BufferSlot*& last_out) {
  const size_t class_bytes = ClassBytes(class_index);
  const size_t slab_bytes = SlabBytes(class_index);
  const size_t count = slab_bytes / class_bytes;
  if (!budget_.TryReserve(slab_bytes)) return false;
  auto slab = memory_.Allocate(slab_bytes);
  if (!slab.ok()) {
    budget_.Unreserve(slab_bytes);
    Log().warn("tocl: {} pool cannot grow: {}", NetworkName(network_), slab.status().ToString());
    return false;
  }
  std::lock_guard grow_lock(grow_mu_);
  const uint32_t first = slot_count_.load(std::memory_order_relaxed);
  // Cannot happen while the table is sized for the budget; the slab stays
  // with its memory (it cannot be given back), only the budget returns.
  if (first + count > table_capacity_) {
    budget_.Unreserve(slab_bytes);
    return false;
  }
  auto storage = std::make_unique<detail::BufferSlot[]>(count);
  for (size_t i = 0; i < count; ++i) {
    detail::BufferSlot& slot = storage[i];
    slot.bytes = slab->base + i * class_bytes;
    slot.offset = slab->offset + i * class_bytes;
    slot.memory_key = slab->memory_key;
    slot.pool = this;
    slot.class_index = class_index;
    slot.index = first + static_cast<uint32_t>(i);
    table_[slot.index] = &slot;
    // Linked in table order; the last one's link is set by PushChain.
    if (i > 0) storage[i - 1].next_free.store(slot.index + 1, std::memory_order_relaxed);
  }
  storage[count - 1].next_free.store(0, std::memory_order_relaxed);
  first_out = &storage[0];
  last_out = &storage[count - 1];
  slot_storage_.push_back(std::move(storage));
  slot_count_.store(first + static_cast<uint32_t>(count), std::memory_order_release);
  size_class.total.fetch_add(count, std::memory_order_relaxed);
  size_class.grown.fetch_add(1, std::memory_order_relaxed);
  size_class.bytes_registered.fetch_add(slab_bytes, std::memory_order_relaxed);
  return true;
}

detail::BufferSlot* BufferPool::TryGet(uint32_t class_index) {
  detail::BufferSlot* slot = nullptr;
  return TryGetMany(class_index, 1, &slot) == 1 ? slot : nullptr;
}

namespace {

constexpr uint64_t kGeneration = uint64_t{1} << 32;

uint32_t TopIndex(uint64_t top) {
  return static_cast<uint32_t>(top);  // table index + 1, 0: empty
}

}  // namespace

detail::BufferSlot* BufferPool::Pop(SizeClass& size_class) {
  // seq_cst: the second look of a getter that asked for a release (see
  // PoolBudget and WantRelease).
  uint64_t top = size_class.free_top.load(std::memory_order_seq_cst);
  for (;;) {
    if (TopIndex(top) == 0) return nullptr;
    // Every index on the list was published (slot_count_) before it was
    // pushed; the push's release makes the table entry visible.
    detail::BufferSlot* slot = table_[TopIndex(top) - 1];
    const uint32_t next = slot->next_free.load(std::memory_order_relaxed);
    const uint64_t desired = ((top & ~uint64_t{0xffffffff}) + kGeneration) | next;
    if (size_class.free_top.compare_exchange_weak(top, desired, std::memory_order_seq_cst,
                                                  std::memory_order_seq_cst)) {
      return slot;
    }
  }
}

void BufferPool::PushChain(SizeClass& size_class, detail::BufferSlot* first,
                           detail::BufferSlot* last) {
  uint64_t top = size_class.free_top.load(std::memory_order_relaxed);
  for (;;) {
    last->next_free.store(TopIndex(top), std::memory_order_relaxed);
    const uint64_t desired = ((top & ~uint64_t{0xffffffff}) + kGeneration) | (first->index + 1);
    // Release: the slot's bytes and links before it is on the list;
    // seq_cst: the releaser then reads who waits (see PoolBudget).
    if (size_class.free_top.compare_exchange_weak(top, desired, std::memory_order_seq_cst,
                                                  std::memory_order_relaxed)) {
      return;
    }
  }
}

size_t BufferPool::TryGetMany(uint32_t class_index, size_t count, detail::BufferSlot** out) {
  if (class_index >= num_classes_) return 0;
  SizeClass& size_class = classes_[class_index];
  size_t got = 0;
  while (got < count) {
    if (detail::BufferSlot* slot = Pop(size_class)) {
      out[got++] = slot;
      continue;
    }
    // Empty: one grower; the others find its slab when they look again.
    std::lock_guard lock(size_class.grow_mu);
    if (detail::BufferSlot* slot = Pop(size_class)) {
      out[got++] = slot;
      continue;
    }
    detail::BufferSlot* first = nullptr;
    detail::BufferSlot* last = nullptr;
    if (!GrowLocked(class_index, size_class, first, last)) break;
    // What this call wants of the new slab (its slots are one array,
    // linked in order), then the rest on the list.
    while (got < count && first <= last) out[got++] = first++;
    if (first <= last) PushChain(size_class, first, last);
  }
  for (size_t i = 0; i < got; ++i) {
    detail::BufferSlot* slot = out[i];
    slot->refs.store(1, std::memory_order_relaxed);
    slot->set_state(BufferState::kIdle);
    slot->header() = wire::Header{};
  }
  return got;
}

Result<detail::BufferSlot*> BufferPool::Get(uint32_t class_index, AtCap at_cap,
                                            std::chrono::steady_clock::time_point deadline) {
  if (class_index >= num_classes_) {
    return InvalidArgument(fmt::format("no {} byte class in the {} pool", ClassBytes(class_index),
                                       NetworkName(network_)));
  }
  for (;;) {
    if (auto* slot = TryGet(class_index)) return slot;
    if (at_cap == AtCap::kFail) {
      return ResourceExhausted(fmt::format(
          "the buffer pools are at their cap of {} bytes and no {} byte {} buffer is free",
          budget_.cap(), ClassBytes(class_index), NetworkName(network_)));
    }
    const uint64_t epoch = budget_.BeginWait();
    if (auto* slot = TryGet(class_index)) {
      budget_.CancelWait();
      return slot;
    }
    if (!budget_.WaitForRelease(deadline, epoch)) {
      return DeadlineExceeded(fmt::format(
          "no {} byte {} buffer was freed in time (the pools are at their cap of {} bytes)",
          ClassBytes(class_index), NetworkName(network_), budget_.cap()));
    }
  }
}

void BufferPool::Unref(detail::BufferSlot* slot) {
  if (slot->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (IsLarge(slot)) {
    FreeLargeSlot(slot);
  } else {
    Put(slot);
  }
}

void BufferPool::Put(detail::BufferSlot* slot) {
  PushChain(classes_[slot->class_index], slot, slot);
  budget_.NotifyRelease();
  // After the push, as NotifyRelease reads its waiters.
  if (release_wanted_.load(std::memory_order_seq_cst) &&
      release_wanted_.exchange(false, std::memory_order_relaxed) && on_release_) {
    on_release_();
  }
}

detail::BufferSlot* BufferPool::SlotAt(uint32_t index) const {
  if (index >= slot_count_.load(std::memory_order_acquire)) return nullptr;
  return table_[index];
}

void BufferPool::CountProvided(uint32_t class_index, int64_t delta) {
  // Several writers (via posts receives from senders, its connection manager
  // and the poller): a load and a store would lose counts.
  classes_[class_index].provided.fetch_add(delta, std::memory_order_relaxed);
}

std::vector<PoolClassStats> BufferPool::Stats() const {
  std::vector<PoolClassStats> stats;
  for (uint32_t c = 0; c < num_classes_; ++c) {
    const SizeClass& size_class = classes_[c];
    PoolClassStats s;
    s.network = std::string(NetworkName(network_));
    s.class_bytes = ClassBytes(c);
    const uint64_t total = size_class.total.load(std::memory_order_relaxed);
    // Counted by walking the list (a count kept on every get and release
    // would cost the message path an atomic): exact while nobody gets or
    // releases, an estimate (at most `total`) while they do.
    s.free = 0;
    for (uint32_t at = TopIndex(size_class.free_top.load(std::memory_order_acquire));
         at != 0 && s.free < total; ++s.free) {
      // A link read while others take and release may name a slot of a
      // slab grown since: SlotAt's acquire makes its table entry visible.
      const detail::BufferSlot* slot = SlotAt(at - 1);
      if (slot == nullptr) break;
      at = slot->next_free.load(std::memory_order_relaxed);
    }
    const int64_t provided = size_class.provided.load(std::memory_order_relaxed);
    s.provided = provided > 0 ? static_cast<uint64_t>(provided) : 0;
    s.in_use = total >= s.free + s.provided ? total - s.free - s.provided : 0;
    s.grown = size_class.grown.load(std::memory_order_relaxed);
    s.bytes_registered = size_class.bytes_registered.load(std::memory_order_relaxed);
    stats.push_back(std::move(s));
  }
  return stats;
}

}  // namespace tocl::buffers
