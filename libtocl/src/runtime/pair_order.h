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
// its fill and delivers it there. A fill is taken only from those two
// processes and only where a marker stood: a fill that arrives at its turn
// from anyone else, for a number that was no marker's, or with another
// size, is refused (its connection closes); one that waited ahead of its
// marker and turns out so is dropped and its carrier found broken. A
// second fill for a number (the relay's and the sender's fallback) is
// dropped, except a long one, which goes to `refill` (the long receiver
// answers its carrier, and hands the message over to the source's own
// process when the relay that carried the first died midway or is slow). The last kRememberMarks
// markers of a pair are remembered to judge late fills.
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

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
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

  // `unexpected_bytes` (the runtime's, read by other threads for flow
  // control) must outlive this; held frames are added to it.
  PairOrder(size_t process_cap, std::atomic<size_t>& unexpected_bytes, Deliver deliver,
            Broken broken = {}, Refill refill = {});
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
  // sender); a key of another process's thread is ignored.
  Status Skip(Gid from_process, const LongKey& key);

  // Drops every held frame (their references, their accounting).
  void Clear();
  // Drops `from_process`'s pairs and what they hold, and what it carries
  // in other pairs (fills).
  void DropProcess(Gid from_process);

  // Bytes held that `from_process` brought.
  size_t HeldBytes(Gid from_process) const;
  // Second copies dropped so far.
  uint64_t duplicates() const { return duplicates_; }

 private:
  // A frame that waits, with the process that brought it.
  struct Held {
    Gid carrier;
    buffers::SlotRef slot;
  };
  // A marker reached: its carrier and size.
  struct Mark {
    Gid carrier;
    uint64_t total = 0;
  };
  struct Pair {
    uint64_t next_seq = 0;
    // next_seq is a marker's number whose fill has not come.
    bool awaiting_fill = false;
    std::map<uint64_t, Held> held;   // messages and markers ahead of next_seq
    std::map<uint64_t, Held> fills;  // fills ahead of their marker
    size_t held_bytes = 0;
    // Numbers not to wait for: long messages whose sender gave up.
    std::set<uint64_t> skipped;
    // The last markers reached; every marker from marks_from on is here.
    std::map<uint64_t, Mark> marks;
    uint64_t marks_from = 0;
  };
  using PairKey = std::pair<uint64_t, uint64_t>;  // source thread, destination thread
  struct PairHash {
    size_t operator()(const PairKey& key) const {
      return std::hash<uint64_t>()(key.first * 0x9E3779B97F4A7C15ull ^ key.second);
    }
  };

  // Delivers what waits in `pair` from its next_seq on (held frames,
  // skipped numbers, fills of markers), until a number is missing.
  Status DeliverHeld(Pair& pair);
  // The frame at `pair`'s next_seq: delivered, or (a marker) its fill
  // delivered or awaited.
  Status Reach(Pair& pair, Held frame);
  Status OnFill(Gid from_process, Pair& pair, buffers::SlotRef slot);
  // A fill for a number the pair has passed.
  Status LateFill(Gid from_process, Pair& pair, buffers::SlotRef slot);
  // Why a fill from `carrier` may not fill `mark` (empty: it may).
  static std::string Misfit(Gid carrier, const wire::Header& fill, const Mark& mark);
  // Holds `frame` in `into` (pair.held or pair.fills), charged to its
  // carrier; InvalidArgument (the carrier dropped) over process_cap.
  Status Hold(Pair& pair, std::map<uint64_t, Held>& into, uint64_t seq, Held frame);
  // Takes a frame out of `from` (pair.held or pair.fills), with its memory
  // accounting.
  Held TakeHeld(Pair& pair, std::map<uint64_t, Held>& from, std::map<uint64_t, Held>::iterator it);
  // `carrier` misbehaved in a frame held earlier: dropped (with Broken)
  // once the current call is done with its pair.
  void BreakLater(Gid carrier, const std::string& why);
  void BreakNow();

  const size_t process_cap_;
  std::atomic<size_t>& unexpected_bytes_;
  const Deliver deliver_;
  const Broken broken_;
  const Refill refill_;
  std::vector<Gid> breaking_;  // BreakLater's
  std::unordered_map<PairKey, Pair, PairHash> pairs_;
  std::unordered_map<uint64_t, size_t> held_by_process_;  // bytes in pairs_, by carrier
  uint64_t duplicates_ = 0;
  // The last pair looked up (node pointers stay valid until erased).
  PairKey last_key_{0, 0};
  Pair* last_pair_ = nullptr;
};

}  // namespace tocl::runtime
