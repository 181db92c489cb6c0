// Pair order: the receive side of MPI's non-overtaking rule, per (source
// thread, destination thread) pair.
//
// A sender numbers the short messages and long-message starts of each pair
// (SendQueue, send_queue.h) and may send them over different networks; the
// receiver delivers them in that order. A frame that arrives ahead of its
// pair's next number is held until the gap fills; a number whose long
// message the sender gave up (its start lost with a connection, or behind a
// lost frame) is skipped, and its start dropped if it comes after all.
//
// Multicast (wire/frame.h: markers and fills): a marker from the source's
// process takes its number like a message; the message itself comes as a
// fill for that number, from the process the marker names (its relay) or
// from the source's own process. On reaching a marker the pair waits for
// its fill and delivers it there. A fill fits its marker when it comes
// from one of those two processes with the marker's tag, size and nonce.
// A fill that does not fit, or is for a number that was no marker's, is
// dropped with a log line and counted (fills_dropped), and never blamed on
// its carrier: a relay above it in a sender's tree, or any process as
// carrier of its own fills, can send misfits (multicast.h), so a misfit
// says nothing about the carrier, and the carrier's own pairs and
// connection stay. A fill is judged when its
// marker is known (on arrival, or when the marker comes); until then it
// waits, within its carrier's budget: at most process_cap bytes of fills
// per carrier in all, apart from what the carrier's own pairs hold, and
// at most that per (carrier, source process) share. When a carrier's
// total is full, the newest fills of its largest shares are dropped to
// make room, unless the arriving fill would make its share the largest
// (or tie it; then the arriving fill is dropped). The sharing is max-min:
// a lighter source's fill gets in unless it would make its share the
// largest, so with n source processes that send no markers (cheap to
// start; or a carrier naming made-up ones) a source is sure only of
// process_cap / (n + 1) of the carrier's budget, and past that its newest
// fills are dropped (noted: given up at their markers, lost, reported Ok
// to their sender). At most
// kFillWindow numbers past the pair's next, kFillsPerCarrier per number and
// carrier, and at most carrier_grace before its marker comes, counted from
// the later of its arrival and its pair's last progress (Housekeeping
// drops and notes it then; it notes each round whether the pair's next
// number moved, so no clock is read on delivery: a marker still coming in
// order behind a slow but moving pair is waited for, and only a stalled
// pair's fills age; a fill that fits its marker held behind a gap waits as
// long as that marker, still charged to its carrier's share, and one that
// does not fit it is dropped then, not noted). Still lost, reported Ok to
// its sender: a fill whose pair does not move for carrier_grace while it
// waits (the receiver congested, its intake stalled, or the pair stalled
// behind a gap). The wait behind a held marker has no time bound of its
// own: it lasts as long as the gap before the marker, which closes when
// the awaited fill comes, its carrier is gone for the grace
// (GiveUpIfCarrierGone), its sender skips it, a note gives it up
// (LostAhead), or the source's held frames pass process_cap (it is
// dropped). A gap behind a live carrier whose fill was lost with no note
// left stalls the pair with or without the skip, so the skip adds no wait
// of its own; its memory is bounded (one fill per number and carrier,
// kFillWindow, the carrier's shares). One over any of these is dropped, and
// noted (at most kRememberDropped notes, apart from the pairs: a pair is
// not kept for them; when they are full, the oldest note of the carrier
// with the most notes goes, the noting carrier's own if it has as many as
// any: a carrier's drops flush its own notes, never those of a carrier
// with fewer, so a carrier's notes survive while it has fewer than
// kRememberDropped / (carriers noting) of them. Not covered: the sources,
// not the carrier, decide which fills an honest relay carries, so a source
// whose fills an honest relay brings here can, by having many of them
// dropped (sending no markers), flush that relay's notes for other
// sources; a number whose note is flushed is not given up: its pair waits
// behind the live carrier until that pair's source process's held frames
// pass process_cap and it is dropped as broken): when its marker
// comes, names that carrier (or the source's process) and no held fill
// fits, the fill was the one, and the number is given up with a warning
// (fills_lost; the message is lost, the pair goes on). At the marker the
// source's own process's fitting fill is taken first, then the named
// carrier's. A second fitting fill (the relay's and the sender's
// fallback) is dropped, except a long one, which goes to `refill` (the
// long receiver answers its carrier, and hands the message over to the
// source's own process when the relay that carried the first died midway
// or is slow). A pair remembers
// the markers of its last kRememberMarks numbers (up to its newest marker)
// to judge late fills; an older late fill is dropped as a second copy. A
// late fill for a number given up (below, or its sender's Skip) is
// dropped; a long one goes to `refill` marked given up (its carrier is
// told the message was not delivered, not that it is all here).
//
// A carrier that exits (CarrierGone) while a pair waits for its fill does
// not stall the pair for ever: once a later frame of the pair waits behind
// the number (the source went on) and both the carrier's exit and that
// stall are `carrier_grace` (the runtime's partial_timeout) old, the
// number is given up with a warning (the message is lost; the source is
// not broken). The stall counts from the first Housekeeping that sees it
// (so within a second of it), not from the exit: the receiver may learn
// of the exit long before the sender does, or before it reaches the
// marker. Housekeeping does it, never the arrival of a frame: the
// source's own fill (its fallback when the relay died) may be overtaken
// by its next frame (another network, or a long fill posted apart from
// the lane), and is delivered in place when it comes within the grace
// period. Housekeeping looks only at the pairs awaiting a fill. A carrier
// dropped for its own pairs' gaps (DropProcess) is not gone: the fills it
// carries stay, and later ones are taken.
//
// Memory: held frames count per pair, per process (the source thread's;
// fills apart, per carrier) and in the runtime's unexpected_bytes (flow
// control). A correct sender's frames are missing only while they travel
// another network, so a sending process whose gaps hold more than
// `process_cap` bytes is broken: its pairs are dropped and the frame is
// refused.
//
// Threading: one thread at a time (the poll token holder). Delivery runs
// the callback on that thread, in order.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "buffers/slot_ref.h"
#include "runtime/long_message.h"
#include "tocl/gid.h"
#include "tocl/status.h"
#include "wire/frame.h"

namespace tocl::runtime {

class PairOrder {
 public:
  // Takes a frame whose turn has come (a short message or a long-message
  // start) with its reference; an error ends the delivery of held frames
  // and is returned to the network that brought the frame.
  using Deliver = std::function<Status(Gid from_process, buffers::SlotRef slot)>;

  // Told when a sending process is found broken (its held frames would
  // exceed process_cap), once its pairs here are dropped.
  using Broken = std::function<void(Gid from_process)>;

  // Takes a second long fill, or a late long fill for a number given up
  // (`given_up`; see above).
  using Refill = std::function<Status(Gid from_process, buffers::SlotRef slot, bool given_up)>;

  // Markers remembered per pair.
  static constexpr size_t kRememberMarks = 64;
  // Fills held per number and carrier ahead of their marker: a relay
  // carries a request once, and only with its sender's ticket
  // (multicast_tickets.h), and a sender sends its own fill once.
  static constexpr size_t kFillsPerCarrier = 1;
  // How far past a pair's next number a fill may wait for its marker.
  static constexpr uint64_t kFillWindow = 4096;
  // Fills dropped ahead of their marker remembered (per lane; per
  // carrier, see above).
  static constexpr size_t kRememberDropped = 1024;
  // Carriers remembered as gone (CarrierGone); past it the one gone
  // longest is forgotten.
  static constexpr size_t kRememberGone = 1024;

  using Clock = std::chrono::steady_clock;

  // `unexpected_bytes` (the runtime's, read by other threads for flow
  // control) must outlive this; held frames are added to it.
  PairOrder(size_t process_cap, std::atomic<size_t>& unexpected_bytes, Deliver deliver,
            Broken broken = {}, Refill refill = {},
            Clock::duration carrier_grace = std::chrono::seconds(10));
  ~PairOrder() { Clear(); }
  PairOrder(const PairOrder&) = delete;
  PairOrder& operator=(const PairOrder&) = delete;

  // A short message, long-message start or marker from `from_process`, or
  // a fill (wire::Relayed): delivered now with what waited behind it, or
  // held; a second copy (a frame sent again after its connection broke, or
  // over another network) is dropped. Takes the reference on every path.
  // InvalidArgument when the sending process's held frames would exceed
  // process_cap (it is dropped); never for a fill (see above).
  Status OnOrdered(Gid from_process, buffers::SlotRef slot);

  // The sender of long message `key` gave up before its start came: the
  // pair's order no longer waits for it, and a late start is dropped.
  // InvalidArgument for a number far ahead or too many skipped (a broken
  // sender); a key of another process's thread is ignored, and so is one
  // of a pair not seen yet unless `receiver_here` (its destination is a
  // thread of this process: the caller knows).
  Status Skip(Gid from_process, const LongKey& key, bool receiver_here = true);

  // Process `carrier` exited (at `now`; not one only dropped): a pair
  // waiting for a fill it carries gives that number up in Housekeeping
  // (see above).
  void CarrierGone(Gid carrier, Clock::time_point now = Clock::now());
  // Gives up the numbers whose carrier has been gone for carrier_grace while
  // later frames of their pair wait, and delivers what waited behind them;
  // drops (and notes) the fills that waited for their marker longer than
  // carrier_grace (see above). Its error: that of a delivery (no network
  // waits for it).
  Status Housekeeping(Clock::time_point now);

  // Drops every held frame (their references, their accounting).
  void Clear();
  // Drops `from_process`'s pairs and what they hold (not the fills it
  // carries for others: see above).
  void DropProcess(Gid from_process);

  // Bytes held that `from_process` brought (its frames and its fills).
  size_t HeldBytes(Gid from_process) const;
  // Whether fills wait ahead of their markers (Housekeeping ages them).
  bool holds_fills() const { return !with_fills_.empty(); }
  // Fills dropped so far (see above).
  uint64_t fills_dropped() const { return fills_dropped_; }
  // Second copies dropped so far.
  uint64_t duplicates() const { return duplicates_; }
  // Pairs known (each holds its order's state).
  size_t pairs() const { return pairs_.size(); }
  // Fills dropped ahead of their marker noted now (at most kRememberDropped).
  size_t drops_remembered() const { return dropped_.size(); }
  // Numbers given up: their carrier went, or their fill was dropped (see
  // above).
  uint64_t fills_lost() const { return fills_lost_; }

  // For tests: what is out of step among the fill and note indexes (Σ
  // share bytes, each carrier's total and its shares' set, the fills the
  // pairs hold, each share's fills found in their pair, the pairs with
  // fills, the notes per carrier); empty if nothing. O(everything held).
  std::string CheckInvariants() const;

 private:
  // A frame that waits, with the process that brought it.
  struct Held {
    Gid carrier;
    buffers::SlotRef slot;
    Clock::time_point since{};  // a fill's arrival (others: not stamped)
    uint64_t order = 0;         // a fill's arrival number (Share::fills)
  };
  // A marker reached: what its fill must be.
  struct Mark {
    Gid carrier;
    uint64_t total = 0;
    uint64_t nonce = 0;
    uint32_t tag = 0;
    uint64_t seq = ~uint64_t{0};  // its number (in the ring: Remember)
    bool given_up = false;        // passed without its fill (GiveUpAwaited)
  };
  struct Pair {
    uint64_t next_seq = 0;
    // next_seq is a marker's number whose fill has not come.
    bool awaiting_fill = false;
    std::map<uint64_t, Held> held;        // messages and markers ahead of next_seq
    std::multimap<uint64_t, Held> fills;  // fills ahead of their marker
    size_t held_bytes = 0;
    // Numbers not to wait for: long messages whose sender gave up.
    std::set<uint64_t> skipped;
    // next_seq's marker, while awaiting_fill.
    Mark awaited;
    // Since when Housekeeping saw it awaiting a gone carrier's fill with a
    // later frame behind (the epoch: not yet).
    Clock::time_point stalled_since{};
    // The markers of the last kRememberMarks numbers up to the newest
    // marker, a ring by number (made at the pair's first marker: plain
    // pairs pay nothing); every marker from marks_from on is here.
    std::unique_ptr<std::array<Mark, kRememberMarks>> marks;
    uint64_t marks_from = 0;
    // While it holds fills: next_seq as AgeFills last saw it, and when
    // AgeFills saw it move (the epoch: not since it held fills).
    uint64_t seen_next = 0;
    Clock::time_point moved_at{};
  };
  using PairKey = std::pair<uint64_t, uint64_t>;  // source thread, destination thread
  struct PairHash {
    size_t operator()(const PairKey& key) const {
      return std::hash<uint64_t>()(key.first * 0x9E3779B97F4A7C15ull ^ key.second);
    }
  };

  static Mark MarkOf(const wire::Header& marker);
  // Records the marker of number `seq` in `pair`'s ring (every one from
  // pair.marks_from on is there).
  static void Remember(Pair& pair, uint64_t seq, const Mark& mark);
  // The marker of number `seq` of `pair` remembered, or null.
  static const Mark* FindMark(const Pair& pair, uint64_t seq);
  static Mark* FindMark(Pair& pair, uint64_t seq);
  // The pair's awaited number is passed: filled, or given up without its
  // fill (its remembered marker says so: a late fill is not taken as a
  // second copy).
  void Filled(Pair& pair);
  void GiveUpAwaited(Pair& pair);
  // Delivers what waits in `pair` from its next_seq on (held frames,
  // skipped numbers, fills of markers), until a number is missing.
  Status DeliverHeld(Pair& pair);
  // The frame at `pair`'s next_seq: delivered, or (a marker) its fill
  // delivered or awaited.
  Status Reach(Pair& pair, Held frame);
  // At a marker: the fills held for it judged, the best delivered.
  // (`marker` is at next_seq.)
  Status TakeHeldFill(Pair& pair, const wire::Header& marker);
  Status OnFill(Gid from_process, Pair& pair, buffers::SlotRef slot);
  // A fill ahead of its marker: held, or dropped and noted (see above).
  Status HoldFill(Pair& pair, Gid carrier, buffers::SlotRef slot);
  // Drops (and notes) the newest fills of `carrier`'s largest shares until
  // `needed` bytes are free, only from shares larger than the arriving
  // fill's (`source`'s, holding `carried`). False (nothing dropped) if
  // those cannot free them: the arriving fill is to be dropped.
  bool MakeRoom(uint64_t carrier, uint64_t source, size_t carried, size_t needed);
  // At `marker` (awaited, no held fill fit): whether a fill that may have
  // been its own was dropped ahead of it. Forgets its pair's numbers up to
  // it.
  bool LostAhead(const Pair& pair, const wire::Header& marker);
  // Notes `fill`, from `carrier`, dropped ahead of its marker; past
  // kRememberDropped, the oldest note of the carrier with the most goes
  // (see above; O(carriers noting) then).
  void NoteDropped(const wire::Header& fill, Gid carrier);
  // Forgets the drops noted for numbers of pair `key` up to `up_to`, or
  // all of them.
  void ForgetDropped(const PairKey& key, uint64_t up_to = ~uint64_t{0});
  // A fill for a number the pair has passed.
  Status LateFill(Gid from_process, Pair& pair, buffers::SlotRef slot);
  // Why a fill from `carrier` may not fill `mark` (empty: it may).
  static std::string Misfit(Gid carrier, const wire::Header& fill, const Mark& mark);
  // Whether `fill` fits `mark`; if not, it is to be dropped (DropFill).
  bool Fits(Gid carrier, const wire::Header& fill, const Mark& mark);
  // A fill for `header`'s number, which was no marker's: dropped.
  Status NoMarker(Gid carrier, const wire::Header& header);
  // Counts and logs a fill dropped (its slot is the caller's to drop); Ok.
  Status DropFill(Gid carrier, const wire::Header& fill, const std::string& why);
  // Holds `frame` (not a fill) at `seq` in `pair.held`, charged to its
  // process; InvalidArgument (the process dropped) over process_cap.
  Status Hold(Pair& pair, uint64_t seq, Held frame);
  // Takes a frame out of pair.held or pair.fills, with its memory
  // accounting.
  template <typename Frames>
  Held TakeHeld(Pair& pair, Frames& from, typename Frames::iterator it);
  // `pair` waits for a fill whose carrier is gone while later frames wait
  // behind it, both for carrier_grace at `now`: the number is given up (see
  // above). True if so.
  bool GiveUpIfCarrierGone(Pair& pair, Clock::time_point now);
  // Drops (and notes: NoteDropped) the fills held longer than carrier_grace
  // at `now` (from the later of their arrival and their pair's last move,
  // which it notes: seen_next), but not one that fits its marker held
  // behind a gap (HeldMarker): it waits as long as the marker does. One
  // that does not fit it is dropped, not noted.
  void AgeFills(Clock::time_point now);
  // `pair`'s marker for number `seq` held behind a gap, or null.
  static const wire::Header* HeldMarker(const Pair& pair, uint64_t seq);
  // Erases the pair of `key` when it is as a fill made it: nothing
  // numbered, held, skipped or remembered in it.
  void EraseIfUntouched(const PairKey& key);

  const size_t process_cap_;
  std::atomic<size_t>& unexpected_bytes_;
  const Deliver deliver_;
  const Broken broken_;
  const Refill refill_;
  const Clock::duration carrier_grace_;
  std::unordered_map<PairKey, Pair, PairHash> pairs_;
  std::unordered_map<uint64_t, size_t> held_by_process_;  // bytes in held, by process
  // The fills of a (carrier, source process): its share of the carrier's
  // budget.
  struct Share {
    size_t bytes = 0;
    std::map<uint64_t, std::pair<Pair*, uint64_t>> fills;  // by arrival: its pair, number
  };
  // A carrier's fills in all.
  struct Carried {
    size_t bytes = 0;
    std::set<std::pair<size_t, uint64_t>> shares;  // (bytes, source process), smallest first
  };
  std::map<std::pair<uint64_t, uint64_t>, Share> shares_;  // by (carrier, source process)
  std::unordered_map<uint64_t, Carried> carried_;          // by carrier
  uint64_t fills_held_ = 0;                                // arrival numbers
  uint64_t duplicates_ = 0;
  uint64_t fills_lost_ = 0;
  uint64_t fills_dropped_ = 0;
  // Fills dropped ahead of their marker (NoteDropped): (source thread,
  // destination thread, number, carrier) to when (a count), and back, per
  // carrier.
  using DropKey = std::tuple<uint64_t, uint64_t, uint64_t, uint64_t>;
  std::map<DropKey, uint64_t> dropped_;
  std::unordered_map<uint64_t, std::map<uint64_t, DropKey>> dropped_by_carrier_;
  uint64_t drops_noted_ = 0;
  // The pairs awaiting a fill (Housekeeping looks at these only; node
  // pointers stay valid until erased).
  std::unordered_set<Pair*> awaiting_;
  // The pairs holding fills (AgeFills looks at these only).
  std::unordered_set<Pair*> with_fills_;
  // Carriers exited (raw process ids), since when.
  std::unordered_map<uint64_t, Clock::time_point> gone_;
  // The last pair looked up (node pointers stay valid until erased).
  PairKey last_key_{0, 0};
  Pair* last_pair_ = nullptr;
};

}  // namespace tocl::runtime
