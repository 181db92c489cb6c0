#include "runtime/pair_order.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <type_traits>
#include <utility>

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

}  // namespace

PairOrder::PairOrder(size_t process_cap, std::atomic<size_t>& unexpected_bytes, Deliver deliver,
                     Broken broken, Refill refill, Clock::duration carrier_grace)
    : process_cap_(process_cap),
      unexpected_bytes_(unexpected_bytes),
      deliver_(std::move(deliver)),
      broken_(std::move(broken)),
      refill_(std::move(refill)),
      carrier_grace_(carrier_grace) {}

void PairOrder::Remember(Pair& pair, uint64_t seq, const Mark& mark) {
  if (seq < pair.marks_from) return;
  if (!pair.marks) pair.marks = std::make_unique<std::array<Mark, kRememberMarks>>();
  Mark& slot = (*pair.marks)[seq % kRememberMarks];
  slot = mark;
  slot.seq = seq;
  if (seq + 1 > kRememberMarks) {
    pair.marks_from = std::max<uint64_t>(pair.marks_from, seq + 1 - kRememberMarks);
  }
}

const PairOrder::Mark* PairOrder::FindMark(const Pair& pair, uint64_t seq) {
  const Mark* slot = pair.marks ? &(*pair.marks)[seq % kRememberMarks] : nullptr;
  return slot != nullptr && slot->seq == seq ? slot : nullptr;
}

PairOrder::Mark* PairOrder::FindMark(Pair& pair, uint64_t seq) {
  return const_cast<Mark*>(FindMark(std::as_const(pair), seq));
}

void PairOrder::Filled(Pair& pair) {
  pair.awaiting_fill = false;
  ++pair.next_seq;
  awaiting_.erase(&pair);
}

void PairOrder::GiveUpAwaited(Pair& pair) {
  if (Mark* mark = FindMark(pair, pair.next_seq)) mark->given_up = true;
  Filled(pair);
}

PairOrder::Mark PairOrder::MarkOf(const wire::Header& marker) {
  return Mark{.carrier = Gid::FromRaw(marker.offset),
              .total = marker.total,
              .nonce = marker.reserved,
              .tag = marker.tag};
}

Status PairOrder::OnOrdered(Gid from_process, buffers::SlotRef slot) {
  const PairKey key{slot->header().source, slot->header().destination};
  if (last_pair_ == nullptr || last_key_ != key) {
    last_pair_ = &pairs_[key];
    last_key_ = key;
  }
  Pair& pair = *last_pair_;
  if (wire::Relayed(slot->header())) {
    Status status = OnFill(from_process, pair, std::move(slot));
    // A fill dropped at once left the pair as it was made: not kept (a
    // fill may name any source; a drop noted is kept apart).
    EraseIfUntouched(key);
    return status;
  }
  const uint64_t seq = slot->header().seq;
  if (seq != pair.next_seq || pair.awaiting_fill) {
    if (slot->header().kind == wire::FrameKind::kMarker &&
        (seq < pair.next_seq || pair.skipped.count(seq) != 0)) {
      // A marker whose number passed without it (its sender said no fill
      // comes: Skip), or a second copy: a late fill is judged by it.
      Remember(pair, seq, MarkOf(slot->header()));
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
    return Hold(pair, seq, Held{from_process, std::move(slot)});
  }
  TOCL_RETURN_IF_ERROR(Reach(pair, Held{from_process, std::move(slot)}));
  return DeliverHeld(pair);
}

Status PairOrder::Reach(Pair& pair, Held frame) {
  const wire::Header& header = frame.slot->header();
  const uint64_t seq = pair.next_seq;
  if (header.kind == wire::FrameKind::kMarker) {
    pair.awaited = MarkOf(header);
    Remember(pair, seq, pair.awaited);
    pair.awaiting_fill = true;
    pair.stalled_since = Clock::time_point{};
    awaiting_.insert(&pair);
    if (!pair.fills.empty()) TOCL_RETURN_IF_ERROR(TakeHeldFill(pair, header));
    if (pair.awaiting_fill && LostAhead(pair, header)) {
      // Its fill came ahead and was dropped for want of room (or crowded
      // out by others its relay was asked to carry): it will not come again.
      Log().warn("tocl: multicast {} is lost: its fill came ahead of it and was dropped",
                 Describe(header));
      ++fills_lost_;
      GiveUpAwaited(pair);
    } else if (!pair.awaiting_fill && !dropped_.empty()) {
      ForgetDropped({header.source, header.destination}, seq);  // filled
    }
    return Status::Ok();
  }
  ++pair.next_seq;
  if (!pair.fills.empty()) {
    for (auto [stray, end] = pair.fills.equal_range(seq); stray != end;) {
      // A fill that waited for a number that was no marker's.
      Held fill = TakeHeld(pair, pair.fills, stray++);
      (void)NoMarker(fill.carrier, fill.slot->header());
    }
  }
  return deliver_(frame.carrier, std::move(frame.slot));
}

bool PairOrder::LostAhead(const Pair& pair, const wire::Header& marker) {
  if (dropped_.empty()) return false;
  const uint64_t seq = marker.seq;
  const uint64_t source_process = SourceProcess(marker).raw();
  bool lost = false;
  for (auto it = dropped_.lower_bound({marker.source, marker.destination, seq, 0});
       it != dropped_.end() && std::get<0>(it->first) == marker.source &&
       std::get<1>(it->first) == marker.destination && std::get<2>(it->first) == seq;
       ++it) {
    const uint64_t carrier = std::get<3>(it->first);
    lost |= carrier == pair.awaited.carrier.raw() || carrier == source_process;
  }
  ForgetDropped({marker.source, marker.destination}, seq);
  return lost;
}

void PairOrder::NoteDropped(const wire::Header& fill, Gid carrier) {
  const DropKey key{fill.source, fill.destination, fill.seq, carrier.raw()};
  if (dropped_.count(key) != 0) return;
  if (dropped_.size() >= kRememberDropped) {
    // The carrier with the most notes gives its oldest: this one itself
    // if it has as many as any (its drops flush only its own notes).
    auto most = dropped_by_carrier_.find(carrier.raw());
    for (auto it = dropped_by_carrier_.begin(); it != dropped_by_carrier_.end(); ++it) {
      if (most == dropped_by_carrier_.end() || it->second.size() > most->second.size()) most = it;
    }
    std::map<uint64_t, DropKey>& notes = most->second;
    dropped_.erase(notes.begin()->second);
    notes.erase(notes.begin());
    if (notes.empty()) dropped_by_carrier_.erase(most);
  }
  dropped_.emplace(key, drops_noted_);
  dropped_by_carrier_[carrier.raw()].emplace(drops_noted_++, key);
}

void PairOrder::ForgetDropped(const PairKey& key, uint64_t up_to) {
  for (auto it = dropped_.lower_bound({key.first, key.second, 0, 0});
       it != dropped_.end() && std::get<0>(it->first) == key.first &&
       std::get<1>(it->first) == key.second && std::get<2>(it->first) <= up_to;) {
    if (auto notes = dropped_by_carrier_.find(std::get<3>(it->first));
        notes != dropped_by_carrier_.end()) {
      notes->second.erase(it->second);
      if (notes->second.empty()) dropped_by_carrier_.erase(notes);
    }
    it = dropped_.erase(it);
  }
}

Status PairOrder::TakeHeldFill(Pair& pair, const wire::Header& marker) {
  const uint64_t seq = marker.seq;
  const Mark mark = MarkOf(marker);
  const Gid source_process = SourceProcess(marker);
  std::vector<Held> candidates;
  for (auto [it, end] = pair.fills.equal_range(seq); it != end;) {
    candidates.push_back(TakeHeld(pair, pair.fills, it++));
  }
  // The source's own process first (it carries the message only when its
  // relay failed it), then the marker's carrier.
  Held* chosen = nullptr;
  for (Held& fill : candidates) {
    if (!Fits(fill.carrier, fill.slot->header(), mark)) {
      fill.slot.reset();
      continue;
    }
    if (chosen == nullptr ||
        (fill.carrier == source_process && chosen->carrier != source_process)) {
      chosen = &fill;
    }
  }
  if (chosen == nullptr) return Status::Ok();
  Filled(pair);
  Held taken = std::move(*chosen);
  taken.slot->header().offset = 0;  // the nonce: the message is the application's now
  TOCL_RETURN_IF_ERROR(deliver_(taken.carrier, std::move(taken.slot)));
  for (Held& fill : candidates) {
    if (!fill.slot) continue;
    if (fill.slot->header().kind == wire::FrameKind::kLongStart && refill_) {
      // The relay's start while the sender's own is taken: the long
      // receiver tells it to stop.
      fill.slot->header().offset = 0;
      TOCL_RETURN_IF_ERROR(refill_(fill.carrier, std::move(fill.slot), /*given_up=*/false));
    } else {
      ++duplicates_;
    }
  }
  return Status::Ok();
}

Status PairOrder::OnFill(Gid from_process, Pair& pair, buffers::SlotRef slot) {
  const uint64_t seq = slot->header().seq;
  if (seq == pair.next_seq && pair.awaiting_fill) {
    if (!Fits(from_process, slot->header(), pair.awaited)) return Status::Ok();
    Filled(pair);
    slot->header().offset = 0;  // the nonce
    TOCL_RETURN_IF_ERROR(deliver_(from_process, std::move(slot)));
    return DeliverHeld(pair);
  }
  if (seq < pair.next_seq) return LateFill(from_process, pair, std::move(slot));
  if (pair.skipped.count(seq) != 0) return Status::Ok();
  if (auto held = pair.held.find(seq); held != pair.held.end()) {
    const wire::Header& at = held->second.slot->header();
    if (at.kind != wire::FrameKind::kMarker) return NoMarker(from_process, slot->header());
    // Its marker waits behind a gap: judged now.
    if (!Fits(from_process, slot->header(), MarkOf(at))) return Status::Ok();
  }
  return HoldFill(pair, from_process, std::move(slot));
}

Status PairOrder::HoldFill(Pair& pair, Gid carrier, buffers::SlotRef slot) {
  const wire::Header& header = slot->header();
  const uint64_t seq = header.seq;
  const size_t bytes = Mailbox::SlotBytes(slot.get());
  size_t from_carrier = 0;
  for (auto [it, end] = pair.fills.equal_range(seq); it != end; ++it) {
    if (it->second.carrier == carrier) ++from_carrier;
  }
  std::string why;
  if (seq - pair.next_seq > kFillWindow) {
    // (No honest fill is that far ahead: not noted for its marker.)
    return DropFill(carrier, header, fmt::format("it is more than {} numbers ahead", kFillWindow));
  }
  const uint64_t source = SourceProcess(header).raw();
  auto share = shares_.find({carrier.raw(), source});
  const size_t carried = share == shares_.end() ? 0 : share->second.bytes;
  auto in_all = carried_.find(carrier.raw());
  const size_t total = in_all == carried_.end() ? 0 : in_all->second.bytes;
  if (from_carrier >= kFillsPerCarrier) {
    why = fmt::format("{} of it from {} wait already", from_carrier, carrier.ToString());
  } else if (carried + bytes > process_cap_) {
    why = fmt::format("the fills {} brought here for {} would exceed {} bytes", carrier.ToString(),
                      SourceProcess(header).ToString(), process_cap_);
  } else if (total + bytes > process_cap_ &&
             !MakeRoom(carrier.raw(), source, carried, total + bytes - process_cap_)) {
    why = fmt::format(
        "the fills {} brought here would exceed {} bytes, and room made for it would make those "
        "for {} the most",
        carrier.ToString(), process_cap_, SourceProcess(header).ToString());
  }
  if (!why.empty()) {
    // The marker judges whether it was the one to fill it (LostAhead).
    NoteDropped(header, carrier);
    return DropFill(carrier, header, why);
  }
  const uint64_t order = fills_held_++;
  pair.fills.emplace(seq, Held{carrier, std::move(slot), Clock::now(), order});
  if (with_fills_.insert(&pair).second) {
    pair.seen_next = pair.next_seq;  // (progress from here on: AgeFills)
    pair.moved_at = Clock::time_point{};
  }
  pair.held_bytes += bytes;
  Share& held = shares_[{carrier.raw(), source}];
  Carried& all = carried_[carrier.raw()];
  all.shares.erase({held.bytes, source});
  held.bytes += bytes;
  held.fills.emplace(order, std::pair{&pair, seq});
  all.shares.insert({held.bytes, source});
  all.bytes += bytes;
  unexpected_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  return Status::Ok();
}

bool PairOrder::MakeRoom(uint64_t carrier, uint64_t source, size_t carried, size_t needed) {
  const Carried& all = carried_.at(carrier);
  // What the shares larger than the arriving fill's give, each taken down
  // to it (a fill at a time, so at least this).
  size_t can_free = 0;
  for (auto it = all.shares.rbegin(); it != all.shares.rend() && it->first > carried; ++it) {
    can_free += it->first - carried;
    if (can_free >= needed) break;
  }
  if (can_free < needed) return false;
  for (size_t freed = 0; freed < needed;) {
    // (While freed < needed, a share larger than `carried` is left: each
    // drop takes at most its size from what the larger shares give. Were
    // none left, the arriving fill is refused: returning true would let
    // the total pass process_cap.)
    const auto [largest, victim_source] = *carried_.at(carrier).shares.rbegin();
    if (largest <= carried || victim_source == source) {
      assert(!"MakeRoom: no share larger than the arriving fill's left");
      return false;
    }
    // Its newest fill (copied out: taking it changes the share).
    const auto [order, where] = *shares_.at({carrier, victim_source}).fills.rbegin();
    const auto [victim_pair, seq] = where;
    auto [it, end] = victim_pair->fills.equal_range(seq);
    while (it != end && it->second.order != order) ++it;
    Held fill = TakeHeld(*victim_pair, victim_pair->fills, it);
    freed += Mailbox::SlotBytes(fill.slot.get());
    const wire::Header& header = fill.slot->header();
    NoteDropped(header, fill.carrier);
    (void)DropFill(fill.carrier, header,
                   "its carrier's fills were full, and those of its source were the most");
    // (A pair its fills made goes with them, as in AgeFills. Never the
    // arriving fill's: that has another source process.)
    if (victim_pair->fills.empty()) EraseIfUntouched(PairKey{header.source, header.destination});
  }
  return true;
}

Status PairOrder::LateFill(Gid from_process, Pair& pair, buffers::SlotRef slot) {
  const wire::Header& header = slot->header();
  if (header.seq < pair.marks_from) {
    // Too old to judge: a late second copy.
    ++duplicates_;
    return Status::Ok();
  }
  const Mark* mark = FindMark(pair, header.seq);
  if (mark == nullptr) return NoMarker(from_process, header);
  if (!Fits(from_process, header, *mark)) return Status::Ok();
  if (header.kind == wire::FrameKind::kLongStart && refill_) {
    // A second long fill (the sender's own try, or its relay's after it):
    // the long receiver answers its carrier, and may hand the message to
    // it (the first carrier died or is too slow). For a number given up,
    // it tells its carrier so.
    slot->header().offset = 0;  // the nonce
    return refill_(from_process, std::move(slot), mark->given_up);
  }
  if (mark->given_up) return DropFill(from_process, header, "its number was given up");
  ++duplicates_;
  return Status::Ok();
}

std::string PairOrder::Misfit(Gid carrier, const wire::Header& header, const Mark& mark) {
  if (carrier != mark.carrier && carrier != SourceProcess(header)) {
    return fmt::format("its marker names {}", mark.carrier.ToString());
  }
  // (total: a short message's length, a long one's size, and the size of
  // a whole message a relay hands its own receiver.)
  if (header.total != mark.total || header.tag != mark.tag || header.offset != mark.nonce) {
    return fmt::format("{} bytes with tag {} do not fit its marker ({} bytes, tag {}{})",
                       header.total, header.tag, mark.total, mark.tag,
                       header.offset != mark.nonce ? ", another nonce" : "");
  }
  return {};
}

bool PairOrder::Fits(Gid carrier, const wire::Header& fill, const Mark& mark) {
  std::string misfit = Misfit(carrier, fill, mark);
  if (misfit.empty()) return true;
  (void)DropFill(carrier, fill, misfit);
  return false;
}

Status PairOrder::NoMarker(Gid carrier, const wire::Header& header) {
  return DropFill(carrier, header, "it was no multicast's number");
}

Status PairOrder::DropFill(Gid carrier, const wire::Header& fill, const std::string& why) {
  ++fills_dropped_;
  Log().warn("tocl: dropping a fill for {} from {}: {}", Describe(fill), carrier.ToString(), why);
  return Status::Ok();
}

Status PairOrder::Hold(Pair& pair, uint64_t seq, Held frame) {
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
  pair.held.emplace(seq, std::move(frame));
  pair.held_bytes += bytes;
  process_held += bytes;
  unexpected_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  return Status::Ok();
}

bool PairOrder::GiveUpIfCarrierGone(Pair& pair, Clock::time_point now) {
  if (pair.held.empty()) return false;
  const Mark& mark = pair.awaited;
  auto gone = gone_.find(mark.carrier.raw());
  if (gone == gone_.end()) return false;
  // The grace counts from when the pair stalled too: its sender's fallback
  // fill may still be on its way however long ago the carrier went.
  if (pair.stalled_since == Clock::time_point{}) pair.stalled_since = now;
  if (now - std::max(gone->second, pair.stalled_since) < carrier_grace_) return false;
  const wire::Header& later = pair.held.begin()->second.slot->header();
  Log().warn(
      "tocl: multicast message {} of {} to {} is lost: its carrier {} exited before its fill "
      "came, no fill came within {} ms, and the sender went on (message {} is here)",
      pair.next_seq, Gid::FromRaw(later.source).ToString(),
      Gid::FromRaw(later.destination).ToString(), mark.carrier.ToString(),
      std::chrono::duration_cast<std::chrono::milliseconds>(carrier_grace_).count(), later.seq);
  ++fills_lost_;
  GiveUpAwaited(pair);
  return true;
}

void PairOrder::CarrierGone(Gid carrier, Clock::time_point now) {
  if (gone_.count(carrier.raw()) != 0) return;  // (since: the first notice)
  if (gone_.size() >= kRememberGone) {
    // The one gone longest: its numbers were given up long ago, if any.
    gone_.erase(std::min_element(gone_.begin(), gone_.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; }));
  }
  gone_.emplace(carrier.raw(), now);
}

void PairOrder::AgeFills(Clock::time_point now) {
  // (A copy: dropping a pair's last fill takes it out of with_fills_.)
  const std::vector<Pair*> holding(with_fills_.begin(), with_fills_.end());
  for (Pair* pair : holding) {
    // The grace counts from the later of a fill's arrival and the pair's
    // last progress seen here: while the pair moves, its source's frames
    // come in order, and the marker may be among them (a loaded receiver).
    if (pair->next_seq != pair->seen_next) {
      pair->seen_next = pair->next_seq;
      pair->moved_at = now;
    }
    for (auto it = pair->fills.begin(); it != pair->fills.end();) {
      if (now - std::max(it->second.since, pair->moved_at) < carrier_grace_) {
        ++it;
        continue;
      }
      std::string misfit;
      if (const wire::Header* marker = HeldMarker(*pair, it->first)) {
        // Its marker waits behind a gap. A fill that fits it (as OnFill
        // judges one arriving after it) waits as long as the marker, within
        // its carrier's share; one that came first, unjudged, and does not
        // fit is dropped now (not noted: it was not the one).
        misfit = Misfit(it->second.carrier, it->second.slot->header(), MarkOf(*marker));
        if (misfit.empty()) {
          ++it;
          continue;
        }
      }
      Held fill = TakeHeld(*pair, pair->fills, it++);
      const wire::Header& header = fill.slot->header();
      if (misfit.empty()) {
        // Should its marker come after all, the number is given up there
        // (LostAhead) rather than awaited.
        NoteDropped(header, fill.carrier);
        misfit = fmt::format(
            "it waited for its marker for more than {} ms",
            std::chrono::duration_cast<std::chrono::milliseconds>(carrier_grace_).count());
      }
      (void)DropFill(fill.carrier, header, misfit);
      // A pair its fills made, and nothing else touched, goes with them
      // (else fills naming fresh pairs, each aged out, would leave pairs
      // without bound).
      if (pair->fills.empty()) {
        EraseIfUntouched(PairKey{header.source, header.destination});
        break;
      }
    }
  }
}

const wire::Header* PairOrder::HeldMarker(const Pair& pair, uint64_t seq) {
  auto held = pair.held.find(seq);
  if (held == pair.held.end()) return nullptr;
  const wire::Header& header = held->second.slot->header();
  return header.kind == wire::FrameKind::kMarker ? &header : nullptr;
}

void PairOrder::EraseIfUntouched(const PairKey& key) {
  auto entry = pairs_.find(key);
  if (entry == pairs_.end()) return;
  const Pair& pair = entry->second;
  if (pair.next_seq != 0 || pair.awaiting_fill || !pair.held.empty() || !pair.fills.empty() ||
      !pair.skipped.empty() || pair.marks) {
    return;
  }
  pairs_.erase(entry);
  last_pair_ = nullptr;
}

Status PairOrder::Housekeeping(Clock::time_point now) {
  if (!with_fills_.empty()) AgeFills(now);
  if (gone_.empty() || awaiting_.empty()) return Status::Ok();
  Status status;
  // (A copy: giving up takes a pair out of awaiting_, delivering may put
  // it back.)
  const std::vector<Pair*> awaiting(awaiting_.begin(), awaiting_.end());
  for (Pair* pair : awaiting) {
    if (!GiveUpIfCarrierGone(*pair, now)) continue;
    if (Status delivered = DeliverHeld(*pair); !delivered.ok() && status.ok()) status = delivered;
  }
  return status;
}

Status PairOrder::DeliverHeld(Pair& pair) {
  while (!pair.awaiting_fill) {
    if (!pair.skipped.empty() && pair.skipped.erase(pair.next_seq) != 0) {
      for (auto [fill, end] = pair.fills.equal_range(pair.next_seq); fill != end;) {
        TakeHeld(pair, pair.fills, fill++).slot.reset();
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

template <typename Frames>
PairOrder::Held PairOrder::TakeHeld(Pair& pair, Frames& from, typename Frames::iterator it) {
  Held frame = std::move(it->second);
  from.erase(it);
  const size_t bytes = Mailbox::SlotBytes(frame.slot.get());
  pair.held_bytes -= bytes;
  const auto uncharge = [&](auto& by, const auto& key) {
    if (auto charged = by.find(key); charged != by.end()) {
      charged->second -= bytes;
      if (charged->second == 0) by.erase(charged);
    }
  };
  if constexpr (std::is_same_v<Frames, decltype(Pair::fills)>) {
    const uint64_t carrier = frame.carrier.raw();
    const uint64_t source = SourceProcess(frame.slot->header()).raw();
    if (auto share = shares_.find({carrier, source}); share != shares_.end()) {
      Carried& all = carried_[carrier];
      all.shares.erase({share->second.bytes, source});
      share->second.bytes -= bytes;
      share->second.fills.erase(frame.order);
      if (share->second.bytes == 0) {
        shares_.erase(share);
      } else {
        all.shares.insert({share->second.bytes, source});
      }
      all.bytes -= bytes;
      if (all.bytes == 0) carried_.erase(carrier);
    }
    if (pair.fills.empty()) with_fills_.erase(&pair);
  } else {
    uncharge(held_by_process_, frame.carrier.raw());
  }
  unexpected_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  return frame;
}

Status PairOrder::Skip(Gid from_process, const LongKey& key, bool receiver_here) {
  // Only a sender's own pairs; numbers far ahead, or too many of them, are
  // a broken sender (an honest one skips one number per failed long Send,
  // kept only until the gap before it fills).
  constexpr uint64_t kMaxAhead = uint64_t{1} << 20;
  constexpr size_t kMaxSkipped = 1024;
  if (Gid::FromRaw(key.source).process() != from_process) return Status::Ok();
  auto found = pairs_.find({key.source, key.destination});
  if (found == pairs_.end()) {
    // (Not for a made-up receiver: each pair holds state.)
    if (!receiver_here) return Status::Ok();
    found = pairs_.try_emplace({key.source, key.destination}).first;
  }
  Pair& pair = found->second;
  if (key.seq == pair.next_seq && pair.awaiting_fill) {
    // A marker's fill that will not come (the sender could not send it).
    GiveUpAwaited(pair);
    return DeliverHeld(pair);
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
      Remember(pair, key.seq, MarkOf(header));
    }
    TakeHeld(pair, pair.held, held).slot.reset();
  }
  pair.skipped.insert(key.seq);
  return DeliverHeld(pair);
}

void PairOrder::DropProcess(Gid from_process) {
  // Erasing a pair drops the frames it held (fills others carried for it
  // are no longer charged to them). The fills it carries for others stay:
  // they have their own budget (HoldFill), and it is not gone as a
  // carrier (a dropped relay is not an exited one).
  for (auto entry = pairs_.begin(); entry != pairs_.end();) {
    if (Gid::FromRaw(entry->first.first).process() != from_process) {
      ++entry;
      continue;
    }
    Pair& pair = entry->second;
    for (auto it = pair.fills.begin(); it != pair.fills.end();) {
      TakeHeld(pair, pair.fills, it++).slot.reset();
    }
    unexpected_bytes_.fetch_sub(pair.held_bytes, std::memory_order_relaxed);
    ForgetDropped(entry->first);
    awaiting_.erase(&pair);
    entry = pairs_.erase(entry);
  }
  held_by_process_.erase(from_process.raw());
  last_pair_ = nullptr;
}

void PairOrder::Clear() {
  for (const auto& [key, pair] : pairs_) {
    unexpected_bytes_.fetch_sub(pair.held_bytes, std::memory_order_relaxed);
  }
  pairs_.clear();
  awaiting_.clear();
  with_fills_.clear();
  held_by_process_.clear();
  shares_.clear();
  carried_.clear();
  dropped_.clear();
  dropped_by_carrier_.clear();
  last_pair_ = nullptr;
}

size_t PairOrder::HeldBytes(Gid from_process) const {
  auto held = held_by_process_.find(from_process.raw());
  auto fills = carried_.find(from_process.raw());
  return (held == held_by_process_.end() ? 0 : held->second) +
         (fills == carried_.end() ? 0 : fills->second.bytes);
}

std::string PairOrder::CheckInvariants() const {
  // The fills the pairs hold, by (carrier, source process): bytes, count.
  std::map<std::pair<uint64_t, uint64_t>, std::pair<size_t, size_t>> in_pairs;
  for (const auto& [key, pair] : pairs_) {
    for (const auto& [seq, fill] : pair.fills) {
      auto& [bytes, count] =
          in_pairs[{fill.carrier.raw(), SourceProcess(fill.slot->header()).raw()}];
      bytes += Mailbox::SlotBytes(fill.slot.get());
      ++count;
    }
    if (!pair.fills.empty() && with_fills_.count(const_cast<Pair*>(&pair)) == 0) {
      return fmt::format("a pair holding fills is not in with_fills_ (seq {})", pair.next_seq);
    }
  }
  for (const Pair* pair : with_fills_) {
    if (pair->fills.empty()) return "a pair in with_fills_ holds no fills";
  }
  std::unordered_map<uint64_t, std::pair<size_t, std::set<std::pair<size_t, uint64_t>>>> sums;
  for (const auto& [key, share] : shares_) {
    const auto [carrier, source] = key;
    if (share.bytes == 0) return fmt::format("an empty share of carrier {:#x}", carrier);
    size_t bytes = 0;
    for (const auto& [order, where] : share.fills) {
      const auto [pair, seq] = where;
      const Held* found = nullptr;
      for (auto [it, end] = pair->fills.equal_range(seq); it != end; ++it) {
        if (it->second.order == order) found = &it->second;
      }
      if (found == nullptr || found->carrier.raw() != carrier ||
          SourceProcess(found->slot->header()).raw() != source) {
        return fmt::format("share ({:#x}, {:#x}): fill {} (number {}) is not in its pair", carrier,
                           source, order, seq);
      }
      bytes += Mailbox::SlotBytes(found->slot.get());
    }
    if (bytes != share.bytes) {
      return fmt::format("share ({:#x}, {:#x}): {} bytes, its fills {}", carrier, source,
                         share.bytes, bytes);
    }
    const auto held = in_pairs.find(key);
    if (held == in_pairs.end() || held->second != std::pair{bytes, share.fills.size()}) {
      return fmt::format("share ({:#x}, {:#x}): the pairs hold other fills", carrier, source);
    }
    in_pairs.erase(held);
    sums[carrier].first += bytes;
    sums[carrier].second.insert({bytes, source});
  }
  if (!in_pairs.empty()) return "the pairs hold fills no share counts";
  if (sums.size() != carried_.size()) return "carried_ has other carriers than shares_";
  for (const auto& [carrier, all] : carried_) {
    const auto sum = sums.find(carrier);
    if (sum == sums.end() || sum->second.first != all.bytes || sum->second.second != all.shares) {
      return fmt::format("carrier {:#x}: its total or its shares' set is out of step", carrier);
    }
  }
  size_t notes = 0;
  for (const auto& [carrier, by_order] : dropped_by_carrier_) {
    if (by_order.empty()) return fmt::format("carrier {:#x}: an empty notes bucket", carrier);
    for (const auto& [noted, key] : by_order) {
      const auto found = dropped_.find(key);
      if (found == dropped_.end() || found->second != noted || std::get<3>(key) != carrier) {
        return fmt::format("carrier {:#x}: note {} is not in dropped_", carrier, noted);
      }
    }
    notes += by_order.size();
  }
  if (notes != dropped_.size()) {
    return fmt::format("{} notes per carrier, {} in dropped_", notes, dropped_.size());
  }
  return {};
}

}  // namespace tocl::runtime
