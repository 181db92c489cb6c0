#include "runtime/pair_order.h"

#include <fmt/format.h>

#include "core/logger.h"
#include "runtime/mailbox.h"
#include "wire/frame.h"

namespace tocl::runtime {

namespace {

Gid SourceProcess(const wire::Header& header) {
  return Gid::FromRaw(header.source).process();
}

std::string Describe(const wire::Header& header) {
  return fmt::format("message {} of {} to {}", header.seq, Gid::FromRaw(header.source).ToString(),
                     Gid::FromRaw(header.destination).ToString());
}

// Records the marker of number `seq` of `pair` (the last `limit` are kept;
// every one from pair.marks_from on is there).
template <typename Pair, typename Mark>
void Remember(Pair& pair, uint64_t seq, const Mark& mark, size_t limit) {
  if (seq < pair.marks_from) return;
  pair.marks[seq] = mark;
  while (pair.marks.size() > limit) {
    pair.marks_from = pair.marks.begin()->first + 1;
    pair.marks.erase(pair.marks.begin());
  }
}

}  // namespace

PairOrder::PairOrder(size_t process_cap, std::atomic<size_t>& unexpected_bytes, Deliver deliver,
                     Broken broken, Refill refill)
    : process_cap_(process_cap),
      unexpected_bytes_(unexpected_bytes),
      deliver_(std::move(deliver)),
      broken_(std::move(broken)),
      refill_(std::move(refill)) {}

Status PairOrder::OnOrdered(Gid from_process, buffers::SlotRef slot) {
  const PairKey key{slot->header().source, slot->header().destination};
  if (last_pair_ == nullptr || last_key_ != key) {
    last_pair_ = &pairs_[key];
    last_key_ = key;
  }
  Pair& pair = *last_pair_;
  if (wire::Relayed(slot->header())) {
    Status status = OnFill(from_process, pair, std::move(slot));
    BreakNow();
    return status;
  }
  const uint64_t seq = slot->header().seq;
  if (seq != pair.next_seq || pair.awaiting_fill) {
    if (slot->header().kind == wire::FrameKind::kMarker &&
        (seq < pair.next_seq || pair.skipped.count(seq) != 0)) {
      // A marker whose number passed without it (its sender said no fill
      // comes: Skip), or a second copy: a late fill is judged by it.
      Remember(pair, seq, Mark{Gid::FromRaw(slot->header().offset), slot->header().total},
               kRememberMarks);
      return Status::Ok();
    }
    if (pair.skipped.count(seq) != 0 ||
        (seq < pair.next_seq && slot->header().kind == wire::FrameKind::kLongStart)) {
      // The start of a long message whose sender gave up (Skip).
      Log().debug("tocl: dropping the start of long message {} from {}: its sender gave up", seq,
                  Gid::FromRaw(slot->header().source).ToString());
      return Status::Ok();
    }
    if (seq <= pair.next_seq || pair.held.count(seq) != 0) {
      // Sent again after a connection broke (the frame had arrived, its
      // acknowledgement had not): the first copy counts. (At next_seq: a
      // marker's, reached already.)
      ++duplicates_;
      Log().debug("tocl: dropping a second copy of message {} from {} (expected {})", seq,
                  Gid::FromRaw(slot->header().source).ToString(), pair.next_seq);
      return Status::Ok();
    }
    return Hold(pair, pair.held, seq, Held{from_process, std::move(slot)});
  }
  Status status = Reach(pair, Held{from_process, std::move(slot)});
  if (status.ok()) status = DeliverHeld(pair);
  BreakNow();
  return status;
}

Status PairOrder::Reach(Pair& pair, Held frame) {
  const wire::Header& header = frame.slot->header();
  const uint64_t seq = pair.next_seq;
  if (header.kind == wire::FrameKind::kMarker) {
    const Mark mark{Gid::FromRaw(header.offset), header.total};
    frame.slot.reset();
    Remember(pair, seq, mark, kRememberMarks);
    pair.awaiting_fill = true;
    auto waiting = pair.fills.find(seq);
    if (waiting == pair.fills.end()) return Status::Ok();
    Held fill = TakeHeld(pair, pair.fills, waiting);
    if (std::string misfit = Misfit(fill.carrier, fill.slot->header(), mark); !misfit.empty()) {
      BreakLater(fill.carrier, misfit);
      return Status::Ok();
    }
    pair.awaiting_fill = false;
    ++pair.next_seq;
    return deliver_(fill.carrier, std::move(fill.slot));
  }
  ++pair.next_seq;
  if (auto stray = pair.fills.find(seq); stray != pair.fills.end()) {
    // A fill that waited for a number that was no marker's.
    Held fill = TakeHeld(pair, pair.fills, stray);
    BreakLater(fill.carrier, fmt::format("a fill for {}, which is no multicast's",
                                         Describe(fill.slot->header())));
  }
  return deliver_(frame.carrier, std::move(frame.slot));
}

Status PairOrder::OnFill(Gid from_process, Pair& pair, buffers::SlotRef slot) {
  const uint64_t seq = slot->header().seq;
  if (seq == pair.next_seq && pair.awaiting_fill) {
    if (std::string misfit = Misfit(from_process, slot->header(), pair.marks.at(seq));
        !misfit.empty()) {
      Log().warn("tocl: refusing a fill from {}: {}", from_process.ToString(), misfit);
      return InvalidArgument(misfit);
    }
    pair.awaiting_fill = false;
    ++pair.next_seq;
    TOCL_RETURN_IF_ERROR(deliver_(from_process, std::move(slot)));
    return DeliverHeld(pair);
  }
  if (seq < pair.next_seq) return LateFill(from_process, pair, std::move(slot));
  if (pair.skipped.count(seq) != 0) return Status::Ok();
  if (auto held = pair.held.find(seq);
      held != pair.held.end() && held->second.slot->header().kind != wire::FrameKind::kMarker) {
    const std::string why =
        fmt::format("a fill for {}, which is no multicast's", Describe(slot->header()));
    Log().warn("tocl: refusing a fill from {}: {}", from_process.ToString(), why);
    return InvalidArgument(why);
  }
  if (pair.fills.count(seq) != 0) {
    // The relay's and the sender's fallback: the first counts.
    ++duplicates_;
    return Status::Ok();
  }
  return Hold(pair, pair.fills, seq, Held{from_process, std::move(slot)});
}

Status PairOrder::LateFill(Gid from_process, Pair& pair, buffers::SlotRef slot) {
  const wire::Header& header = slot->header();
  if (header.seq < pair.marks_from) {
    // Too old to judge: a late second copy.
    ++duplicates_;
    return Status::Ok();
  }
  auto mark = pair.marks.find(header.seq);
  if (mark == pair.marks.end()) {
    const std::string why = fmt::format("a fill for {}, which is no multicast's", Describe(header));
    Log().warn("tocl: refusing a fill from {}: {}", from_process.ToString(), why);
    return InvalidArgument(why);
  }
  if (std::string misfit = Misfit(from_process, header, mark->second); !misfit.empty()) {
    Log().warn("tocl: refusing a fill from {}: {}", from_process.ToString(), misfit);
    return InvalidArgument(misfit);
  }
  if (header.kind == wire::FrameKind::kLongStart && refill_) {
    // A second long fill (the sender's own try, or its relay's after it):
    // the long receiver answers its carrier, and may hand the message to
    // it (the first carrier died or is too slow).
    return refill_(from_process, std::move(slot));
  }
  ++duplicates_;
  return Status::Ok();
}

std::string PairOrder::Misfit(Gid carrier, const wire::Header& header, const Mark& mark) {
  if (carrier != mark.carrier && carrier != SourceProcess(header)) {
    return fmt::format("a fill for {} from {}: its marker names {}", Describe(header),
                       carrier.ToString(), mark.carrier.ToString());
  }
  // (total: a short message's length, a long one's size, and the size of
  // a whole message a relay hands its own receiver.)
  if (header.total != mark.total) {
    return fmt::format("a fill of {} bytes for {}: its marker says {}", header.total,
                       Describe(header), mark.total);
  }
  return {};
}

Status PairOrder::Hold(Pair& pair, std::map<uint64_t, Held>& into, uint64_t seq, Held frame) {
  const size_t bytes = Mailbox::SlotBytes(frame.slot.get());
  const Gid carrier = frame.carrier;
  size_t& process_held = held_by_process_[carrier.raw()];
  if (process_held + bytes > process_cap_) {
    frame.slot.reset();
    const uint64_t expected = pair.next_seq;
    DropProcess(carrier);
    if (broken_) broken_(carrier);
    return InvalidArgument(fmt::format(
        "sequence number {} arrived while {} never did; the frames held waiting exceed {} bytes",
        seq, expected, process_cap_));
  }
  into.emplace(seq, std::move(frame));
  pair.held_bytes += bytes;
  process_held += bytes;
  unexpected_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  return Status::Ok();
}

Status PairOrder::DeliverHeld(Pair& pair) {
  while (!pair.awaiting_fill) {
    if (!pair.skipped.empty() && pair.skipped.erase(pair.next_seq) != 0) {
      if (auto fill = pair.fills.find(pair.next_seq); fill != pair.fills.end()) {
        TakeHeld(pair, pair.fills, fill).slot.reset();
      }
      ++pair.next_seq;
      continue;
    }
    auto next = pair.held.find(pair.next_seq);
    if (next == pair.held.end()) return Status::Ok();
    TOCL_RETURN_IF_ERROR(Reach(pair, TakeHeld(pair, pair.held, next)));
  }
  return Status::Ok();
}

PairOrder::Held PairOrder::TakeHeld(Pair& pair, std::map<uint64_t, Held>& from,
                                    std::map<uint64_t, Held>::iterator it) {
  Held frame = std::move(it->second);
  from.erase(it);
  const size_t bytes = Mailbox::SlotBytes(frame.slot.get());
  pair.held_bytes -= bytes;
  held_by_process_[frame.carrier.raw()] -= bytes;
  unexpected_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  return frame;
}

void PairOrder::BreakLater(Gid carrier, const std::string& why) {
  Log().warn("tocl: dropping what {} carries: {}", carrier.ToString(), why);
  breaking_.push_back(carrier);
}

void PairOrder::BreakNow() {
  if (breaking_.empty()) return;
  std::vector<Gid> breaking;
  breaking.swap(breaking_);
  for (Gid carrier : breaking) {
    DropProcess(carrier);
    if (broken_) broken_(carrier);
  }
}

Status PairOrder::Skip(Gid from_process, const LongKey& key) {
  // Only a sender's own pairs; numbers far ahead, or too many of them, are
  // a broken sender (an honest one skips one number per failed long Send,
  // kept only until the gap before it fills).
  constexpr uint64_t kMaxAhead = uint64_t{1} << 20;
  constexpr size_t kMaxSkipped = 1024;
  if (Gid::FromRaw(key.source).process() != from_process) return Status::Ok();
  Pair& pair = pairs_[{key.source, key.destination}];
  if (key.seq == pair.next_seq && pair.awaiting_fill) {
    // A marker's fill that will not come (the sender could not send it).
    pair.awaiting_fill = false;
    ++pair.next_seq;
    Status status = DeliverHeld(pair);
    BreakNow();
    return status;
  }
  if (key.seq < pair.next_seq || pair.skipped.count(key.seq) != 0) {
    return Status::Ok();  // its start came: the message was finished or given up
  }
  if (key.seq - pair.next_seq > kMaxAhead || pair.skipped.size() >= kMaxSkipped) {
    return InvalidArgument(
        fmt::format("an abort of long message {} while {} is the next expected ({} others skipped)",
                    key.seq, pair.next_seq, pair.skipped.size()));
  }
  if (auto held = pair.held.find(key.seq); held != pair.held.end()) {
    // The start (or marker) came but waits behind a gap: it is dropped now.
    const wire::Header& header = held->second.slot->header();
    if (header.kind == wire::FrameKind::kMarker) {
      Remember(pair, key.seq, Mark{Gid::FromRaw(header.offset), header.total}, kRememberMarks);
    }
    TakeHeld(pair, pair.held, held).slot.reset();
  }
  pair.skipped.insert(key.seq);
  Status status = DeliverHeld(pair);
  BreakNow();
  return status;
}

void PairOrder::DropProcess(Gid from_process) {
  // Erasing a pair drops the frames it held (fills others carried for it
  // are no longer charged to them).
  std::erase_if(pairs_, [&](auto& entry) {
    if (Gid::FromRaw(entry.first.first).process() != from_process) return false;
    unexpected_bytes_.fetch_sub(entry.second.held_bytes, std::memory_order_relaxed);
    for (const auto& [seq, fill] : entry.second.fills) {
      if (fill.carrier != from_process) {
        held_by_process_[fill.carrier.raw()] -= Mailbox::SlotBytes(fill.slot.get());
      }
    }
    return true;
  });
  // What it carried in the pairs of others (fills; frames it brought).
  if (held_by_process_.count(from_process.raw()) != 0) {
    for (auto& [key, pair] : pairs_) {
      for (auto* frames : {&pair.held, &pair.fills}) {
        for (auto it = frames->begin(); it != frames->end();) {
          if (it->second.carrier == from_process) {
            TakeHeld(pair, *frames, it++).slot.reset();
          } else {
            ++it;
          }
        }
      }
    }
  }
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
