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
// One from any other process at its turn, or for a number that was no
// marker's, is refused (its connection closes); one that waited ahead of
// its marker and turns out so is dropped and its carrier found broken. A
// misfit from the named carrier or the source's process is dropped with a
// log line (anyone may ask a relay to carry bytes in another's name: the
// nonce is what it cannot forge). Ahead of its marker, at most
// kFillsPerCarrier fills per number and carrier are held (a fill judged on
// arrival when its marker already waits behind a gap); at the marker the
// source's own process's fitting fill is taken first, then the named
// carrier's. A second fitting fill (the relay's and the sender's fallback)
// is dropped, except a long one, which goes to `refill` (the long receiver
// answers its carrier, and hands the message over to the source's own
// process when the relay that carried the first died midway or is slow).
// A pair remembers the markers of its last kRememberMarks numbers (up to
// its newest marker) to judge late fills; an older late fill is dropped as
// a second copy.
//
// A carrier that exits (CarrierGone) or is dropped (DropProcess) while a
// pair waits for its fill does not stall the pair for ever: once it has
// been gone for `carrier_grace` (the runtime's partial_timeout) and a later
// frame of the pair waits behind the number (the source went on), the
// number is given up with a warning (the message is lost; the source is not
// broken). Housekeeping does it, never the arrival of a frame: the source's
// own fill (its fallback when the relay died) may be overtaken by its next
// frame (another network, or a long fill posted apart from the lane), and
// is delivered in place when it comes within the grace period. A dropped
// carrier is not an exited one: a fill it sends again is taken, and it is
// no longer counted gone.
//
// Memory: held frames count per pair, per carrying process (the process
// that sent the frame here: the source thread's, or a fill's carrier) and
// in the runtime's unexpected_bytes (flow control). A correct sender's
// frames are missing only while they travel another network, so a carrying
// process whose gaps hold more than `process_cap` bytes is broken: its
// pairs and what it carries are dropped and the frame is refused.
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
#include <unordered_map>
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

  // Takes a second long fill (see above).
  using Refill = std::function<Status(Gid from_process, buffers::SlotRef slot)>;

  // Markers remembered per pair.
  static constexpr size_t kRememberMarks = 64;
  // Fills held per number and carrier ahead of their marker: a relay's
  // own, and one someone else had it carry first.
  static constexpr size_t kFillsPerCarrier = 2;
  // Carriers remembered as gone (CarrierGone, DropProcess); past it the
  // one gone longest is forgotten.
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
  // InvalidArgument when the carrying process's held frames would exceed
  // process_cap (it is dropped), or for a fill refused (see above).
  Status OnOrdered(Gid from_process, buffers::SlotRef slot);

  // The sender of long message `key` gave up before its start came: the
  // pair's order no longer waits for it, and a late start is dropped.
  // InvalidArgument for a number far ahead or too many skipped (a broken
  // sender); a key of another process's thread is ignored, and so is one
  // of a pair not seen yet unless `receiver_here` (its destination is a
  // thread of this process: the caller knows).
  Status Skip(Gid from_process, const LongKey& key, bool receiver_here = true);

  // Process `carrier` exited (at `now`): a pair waiting for a fill it
  // carries gives that number up in Housekeeping (see above).
  void CarrierGone(Gid carrier, Clock::time_point now = Clock::now());
  // Gives up the numbers whose carrier has been gone for carrier_grace while
  // later frames of their pair wait, and delivers what waited behind them
  // (see above). Its error: that of a delivery (no network waits for it).
  Status Housekeeping(Clock::time_point now);

  // Drops every held frame (their references, their accounting).
  void Clear();
  // Drops `from_process`'s pairs and what they hold, and what it carries
  // in other pairs (fills); it counts as gone (dropped, not exited: see
  // above) from `now`.
  void DropProcess(Gid from_process, Clock::time_point now = Clock::now());

  // Bytes held that `from_process` brought.
  size_t HeldBytes(Gid from_process) const;
  // Second copies dropped so far.
  uint64_t duplicates() const { return duplicates_; }
  // Pairs known (each holds its order's state).
  size_t pairs() const { return pairs_.size(); }
  // Numbers given up because their carrier went (see above).
  uint64_t fills_lost() const { return fills_lost_; }

 private:
  // A frame that waits, with the process that brought it.
  struct Held {
    Gid carrier;
    buffers::SlotRef slot;
    // A fill: another from the same carrier for its number was dropped
    // (kFillsPerCarrier): the one that fits may have been that one.
    bool crowded = false;
  };
  // A marker reached: what its fill must be.
  struct Mark {
    Gid carrier;
    uint64_t total = 0;
    uint64_t nonce = 0;
    uint32_t tag = 0;
    uint64_t seq = ~uint64_t{0};  // its number (in the ring: Remember)
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
    // The markers of the last kRememberMarks numbers up to the newest
    // marker, a ring by number (made at the pair's first marker: plain
    // pairs pay nothing); every marker from marks_from on is here.
    std::unique_ptr<std::array<Mark, kRememberMarks>> marks;
    uint64_t marks_from = 0;
  };
  using PairKey = std::pair<uint64_t, uint64_t>;  // source thread, destination thread
  struct PairHash {
    size_t operator()(const PairKey& key) const {
      return std::hash<uint64_t>()(key.first * 0x9E3779B97F4A7C15ull ^ key.second);
    }
  };

  static Mark MarkOf(const wire::Header& marker);
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
  // A fill for a number the pair has passed.
  Status LateFill(Gid from_process, Pair& pair, buffers::SlotRef slot);
  // Why a fill from `carrier` may not fill `mark` (empty: it may), and
  // whether `carrier` is neither the marker's nor the source's process.
  static std::string Misfit(Gid carrier, const wire::Header& fill, const Mark& mark,
                            bool* stranger = nullptr);
  // Empty when `fill` fits `mark`; else what to return for it (it is
  // dropped): InvalidArgument from a stranger (its connection closes), Ok
  // with a log line from the marker's carrier or the source's process.
  static std::optional<Status> Refuse(Gid carrier, const wire::Header& fill, const Mark& mark);
  // Refuses a fill for `header`'s number, which was no marker's.
  static Status NoMarker(Gid carrier, const wire::Header& header);
  // Holds `frame` at `seq` in `pair.held` or `pair.fills`, charged to its
  // carrier; InvalidArgument (the carrier dropped) over process_cap.
  template <typename Frames>
  Status Hold(Pair& pair, Frames& into, uint64_t seq, Held frame);
  // Takes a frame out of pair.held or pair.fills, with its memory
  // accounting.
  template <typename Frames>
  Held TakeHeld(Pair& pair, Frames& from, typename Frames::iterator it);
  // `pair` waits for a fill whose carrier has been gone for carrier_grace
  // at `now` while later frames wait behind it: the number is given up (see
  // above). True if so.
  bool GiveUpIfCarrierGone(Pair& pair, Clock::time_point now);
  // Notes `carrier` gone since `now` (exited, or dropped), forgetting the
  // one gone longest when kRememberGone are.
  void NoteGone(Gid carrier, Clock::time_point now, bool exited);
  // `carrier` misbehaved in a frame held earlier: dropped (with Broken)
  // once the current call is done with its pair.
  void BreakLater(Gid carrier, const std::string& why);
  void BreakNow();

  const size_t process_cap_;
  std::atomic<size_t>& unexpected_bytes_;
  const Deliver deliver_;
  const Broken broken_;
  const Refill refill_;
  const Clock::duration carrier_grace_;
  std::vector<Gid> breaking_;  // BreakLater's
  std::unordered_map<PairKey, Pair, PairHash> pairs_;
  std::unordered_map<uint64_t, size_t> held_by_process_;  // bytes in pairs_, by carrier
  uint64_t duplicates_ = 0;
  uint64_t fills_lost_ = 0;
  // Carriers gone (raw process ids): since when, and whether exited (else
  // dropped: until it sends a fill again).
  struct Gone {
    Clock::time_point since;
    bool exited = false;
  };
  std::unordered_map<uint64_t, Gone> gone_;
  // The last pair looked up (node pointers stay valid until erased).
  PairKey last_key_{0, 0};
  Pair* last_pair_ = nullptr;
};

}  // namespace tocl::runtime
