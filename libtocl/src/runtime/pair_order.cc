#include "runtime/pair_order.h"

#include <fmt/format.h>

#include "core/logger.h"
#include "runtime/mailbox.h"
#include "wire/frame.h"

namespace tocl::runtime {

PairOrder::PairOrder(size_t process_cap, std::atomic<size_t>& unexpected_bytes, Deliver deliver,
                     Broken broken)
    : process_cap_(process_cap),
      unexpected_bytes_(unexpected_bytes),
      deliver_(std::move(deliver)),
      broken_(std::move(broken)) {}

Status PairOrder::OnOrdered(Gid from_process, buffers::SlotRef slot) {
  const PairKey key{slot->header().source, slot->header().destination};
  if (last_pair_ == nullptr || last_key_ != key) {
    last_pair_ = &pairs_[key];
    last_key_ = key;
  }
  Pair& pair = *last_pair_;
  const uint64_t seq = slot->header().seq;
  if (seq != pair.next_seq) {
    const size_t bytes = Mailbox::SlotBytes(slot.get());
    if (pair.skipped.count(seq) != 0 ||
        (seq < pair.next_seq && slot->header().kind == wire::FrameKind::kLongStart)) {
      // The start of a long message whose sender gave up (Skip).
      Log().debug("tocl: dropping the start of long message {} from {}: its sender gave up", seq,
                  Gid::FromRaw(slot->header().source).ToString());
      return Status::Ok();
    }
    if (seq < pair.next_seq || pair.held.count(seq) != 0) {
      // Sent again after a connection broke (the frame had arrived, its
      // acknowledgement had not): the first copy counts.
      ++duplicates_;
      Log().debug("tocl: dropping a second copy of message {} from {} (expected {})", seq,
                  Gid::FromRaw(slot->header().source).ToString(), pair.next_seq);
      return Status::Ok();
    }
    // Counted against the source thread's process, whose numbers they
    // are: a relayed frame (multicast) comes from another process.
    const Gid sender = SenderOf(slot->header());
    size_t& process_held = held_by_process_[sender.raw()];
    if (process_held + bytes > process_cap_) {
      slot.reset();
      const uint64_t expected = pair.next_seq;
      DropProcess(sender);
      if (broken_) broken_(sender);
      return InvalidArgument(fmt::format(
          "sequence number {} arrived while {} never did; the frames held waiting exceed {} bytes",
          seq, expected, process_cap_));
    }
    pair.held.emplace(seq, std::move(slot));
    pair.held_bytes += bytes;
    process_held += bytes;
    unexpected_bytes_.fetch_add(bytes, std::memory_order_relaxed);
    return Status::Ok();
  }
  ++pair.next_seq;
  TOCL_RETURN_IF_ERROR(deliver_(from_process, std::move(slot)));
  return DeliverHeld(from_process, pair);
}

Status PairOrder::DeliverHeld(Gid from_process, Pair& pair) {
  for (;;) {
    if (!pair.skipped.empty() && pair.skipped.erase(pair.next_seq) != 0) {
      ++pair.next_seq;
      continue;
    }
    auto next = pair.held.find(pair.next_seq);
    if (next == pair.held.end()) return Status::Ok();
    buffers::SlotRef slot = TakeHeld(pair, next);
    ++pair.next_seq;
    TOCL_RETURN_IF_ERROR(deliver_(from_process, std::move(slot)));
  }
}

buffers::SlotRef PairOrder::TakeHeld(Pair& pair,
                                     std::map<uint64_t, buffers::SlotRef>::iterator it) {
  buffers::SlotRef slot = std::move(it->second);
  pair.held.erase(it);
  const size_t bytes = Mailbox::SlotBytes(slot.get());
  pair.held_bytes -= bytes;
  held_by_process_[SenderOf(slot->header()).raw()] -= bytes;
  unexpected_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  return slot;
}

Status PairOrder::Skip(Gid from_process, const LongKey& key) {
  // Only a sender's own pairs; numbers far ahead, or too many of them, are
  // a broken sender (an honest one skips one number per failed long Send,
  // kept only until the gap before it fills).
  constexpr uint64_t kMaxAhead = uint64_t{1} << 20;
  constexpr size_t kMaxSkipped = 1024;
  if (Gid::FromRaw(key.source).process() != from_process) return Status::Ok();
  Pair& pair = pairs_[{key.source, key.destination}];
  if (key.seq < pair.next_seq || pair.skipped.count(key.seq) != 0) {
    return Status::Ok();  // its start came: the message was finished or given up
  }
  if (key.seq - pair.next_seq > kMaxAhead || pair.skipped.size() >= kMaxSkipped) {
    return InvalidArgument(
        fmt::format("an abort of long message {} while {} is the next expected ({} others skipped)",
                    key.seq, pair.next_seq, pair.skipped.size()));
  }
  if (auto held = pair.held.find(key.seq); held != pair.held.end()) {
    // The start came but waits behind a gap: it is dropped now.
    TakeHeld(pair, held).reset();
  }
  pair.skipped.insert(key.seq);
  return DeliverHeld(from_process, pair);
}

void PairOrder::DropProcess(Gid from_process) {
  // Erasing a pair drops the frames it held.
  std::erase_if(pairs_, [&](auto& entry) {
    if (Gid::FromRaw(entry.first.first).process() != from_process) return false;
    unexpected_bytes_.fetch_sub(entry.second.held_bytes, std::memory_order_relaxed);
    return true;
  });
  held_by_process_.erase(from_process.raw());
  last_pair_ = nullptr;
}

void PairOrder::Clear() {
  for (const auto& [key, pair] : pairs_) {
    unexpected_bytes_.fetch_sub(pair.held_bytes, std::memory_order_relaxed);
  }
  pairs_.clear();
  held_by_process_.clear();
  last_pair_ = nullptr;
}

size_t PairOrder::HeldBytes(Gid from_process) const {
  auto it = held_by_process_.find(from_process.raw());
  return it == held_by_process_.end() ? 0 : it->second;
}

}  // namespace tocl::runtime
