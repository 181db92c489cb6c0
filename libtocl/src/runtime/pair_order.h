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
// Memory: held frames count per pair, per sending process (the source
// thread's: a relay's frames, multicast, count for the process whose
// numbers they carry) and in the runtime's unexpected_bytes (flow control). A correct sender's
// frames are missing only while they travel another network, so a sending process whose gaps hold
// more than `process_cap` bytes is broken: its pairs are dropped and the frame is refused.
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
#include <unordered_map>
#include <utility>

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

  // `unexpected_bytes` (the runtime's, read by other threads for flow
  // control) must outlive this; held frames are added to it.
  PairOrder(size_t process_cap, std::atomic<size_t>& unexpected_bytes, Deliver deliver,
            Broken broken = {});
  ~PairOrder() { Clear(); }
  PairOrder(const PairOrder&) = delete;
  PairOrder& operator=(const PairOrder&) = delete;

  // A short message or long-message start from `from_process`: delivered
  // now with what waited behind it, or held; a second copy (a frame sent
  // again after its connection broke, or over another network) is
  // dropped. Takes the reference on every path. InvalidArgument when the
  // sending process's held frames would exceed process_cap (its pairs are
  // dropped).
  Status OnOrdered(Gid from_process, buffers::SlotRef slot);

  // The sender of long message `key` gave up before its start came: the
  // pair's order no longer waits for it, and a late start is dropped.
  // InvalidArgument for a number far ahead or too many skipped (a broken
  // sender); a key of another process's thread is ignored.
  Status Skip(Gid from_process, const LongKey& key);

  // Drops every held frame (their references, their accounting).
  void Clear();
  // Drops `from_process`'s pairs and what they hold.
  void DropProcess(Gid from_process);

  // Bytes held for `from_process`'s pairs.
  size_t HeldBytes(Gid from_process) const;
  // Second copies dropped so far.
  uint64_t duplicates() const { return duplicates_; }

 private:
  struct Pair {
    uint64_t next_seq = 0;
    std::map<uint64_t, buffers::SlotRef> held;  // arrived ahead of next_seq
    size_t held_bytes = 0;
    // Numbers not to wait for: long messages whose sender gave up.
    std::set<uint64_t> skipped;
  };
  using PairKey = std::pair<uint64_t, uint64_t>;  // source thread, destination thread
  struct PairHash {
    size_t operator()(const PairKey& key) const {
      return std::hash<uint64_t>()(key.first * 0x9E3779B97F4A7C15ull ^ key.second);
    }
  };

  // Delivers what waits in `pair` from its next_seq on (held frames,
  // skipped numbers), until a number is missing.
  Status DeliverHeld(Gid from_process, Pair& pair);
  // The process whose number a frame carries (its source thread's).
  static Gid SenderOf(const wire::Header& header) { return Gid::FromRaw(header.source).process(); }
  // Takes a frame out of `pair.held`, with its memory accounting.
  buffers::SlotRef TakeHeld(Pair& pair, std::map<uint64_t, buffers::SlotRef>::iterator it);

  const size_t process_cap_;
  std::atomic<size_t>& unexpected_bytes_;
  const Deliver deliver_;
  const Broken broken_;
  std::unordered_map<PairKey, Pair, PairHash> pairs_;
  std::unordered_map<uint64_t, size_t> held_by_process_;  // bytes in pairs_, by source process
  uint64_t duplicates_ = 0;
  // The last pair looked up (node pointers stay valid until erased).
  PairKey last_key_{0, 0};
  Pair* last_pair_ = nullptr;
};

}  // namespace tocl::runtime
