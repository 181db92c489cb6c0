// The send side of a process for short messages (the ToCL paper's §4.2,
// the receive side's counterpart): what every send checks, and the way of
// one message that fits a size class. To a thread of this process it goes
// straight into the mailbox; to another process through the SendQueue of
// its destination (PeerRoutes), over the buffer's own network when that
// reaches the peer (no copy to another pool). A copied payload goes
// straight into a receiver's buffer where a network offers that (shm,
// Transport::post_copy), else through a buffer of the fastest network's
// pool. A payload too large for a class is a long message: the `send_long`
// hook's.
//
// It sees the runtime only through the parts it is given and its hook.
//
// Threading: every method from any thread, once Open returned. A copy
// that fits a receive lane takes only the lock of its receiver's lane
// (SendQueue::TryPostLane) while the destination's queue is ready and
// empty; everything else takes the destination's lock. A sender may wait
// in SendSlot/SendCopy for room in a full lane or ring, or in its
// destination's queue (back-pressure), and for a pool buffer at the pool's
// cap.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>

#include "buffers/slot_ref.h"
#include "runtime/peer_routes.h"
#include "runtime/rails.h"
#include "runtime/receive_side.h"
#include "tocl/gid.h"
#include "tocl/runtime.h"
#include "tocl/status.h"
#include "wire/frame.h"

namespace tocl::runtime {

// InvalidArgument for kAnyTag (it matches any tag in Recv; nothing is sent
// with it), ok for every other tag.
Status CheckSendableTag(Tag tag);

// A multicast's fill (wire/frame.h): the number its marker took in the
// pair, and the nonce the marker holds.
struct FillOf {
  uint64_t seq = 0;
  uint64_t nonce = 0;
};

// Makes `header` (a message's, or a whole message's) `fill`'s frame: its
// number, the nonce (in `offset`), the relayed flag.
inline void StampFill(wire::Header& header, const FillOf& fill) {
  header.seq = fill.seq;
  header.offset = fill.nonce;
  header.flags |= wire::kFlagRelayed;
}

class SendSide {
 public:
  // A payload larger than the short maximum (Runtime::Impl::SendLong).
  using SendLong =
      std::function<Status(Gid from, Gid to, Tag tag, std::span<const std::byte> payload)>;

  // Each part must outlive this.
  SendSide(ReceiveSide& receive, PeerRoutes& routes, const Rails& rails,
           const std::atomic<bool>& shutting_down, SendLong send_long)
      : receive_(receive),
        routes_(routes),
        rails_(rails),
        shutting_down_(shutting_down),
        send_long_(std::move(send_long)) {}
  SendSide(const SendSide&) = delete;
  SendSide& operator=(const SendSide&) = delete;

  // The process once enrolled, the classes once resolved: before any send.
  void Open(Gid process, uint32_t num_classes) {
    process_ = process;
    num_classes_ = num_classes;
  }

  // InvalidArgument unless `from` is an enrolled thread of this process;
  // FailedPrecondition once it has left.
  Status CheckSender(Gid from) const;
  // Everything about a send that does not need the destination: the
  // sender, the tag, the destination's form, the runtime's state.
  Status CheckSend(Gid from, Gid to, Tag tag) const;

  // Sends the reference in `slot` (header length set) over `network`'s
  // route when it reaches the destination: Ok takes it (`slot` is left
  // empty); on error it is still in `slot`, the caller's. PostSlot skips
  // CheckSend. `flags`: the frame's wire flags (wire::kFlagPackedPiece for
  // a packed message's piece). `fill_of`: a multicast's fill (wire/frame.h)
  // for that number of the (from, to) pair, posted numbered already
  // (SendQueue::PostNumbered) with wire::kFlagRelayed and its nonce, to
  // another process.
  Status SendSlot(Gid from, Gid to, Tag tag, buffers::SlotRef& slot, Network network,
                  uint16_t flags = 0);
  Status PostSlot(Gid from, Gid to, Tag tag, buffers::SlotRef& slot, Network network,
                  uint16_t flags = 0, std::optional<FillOf> fill_of = std::nullopt);
  // Runtime::Send of an application's Buffer (see runtime.h). By rvalue
  // the buffer's reference goes with the send and a failed send gives it
  // back; by reference the runtime shares the buffer (or, to this process
  // or for a long message, sends a copy) and the caller keeps it.
  Status SendBuffer(Gid from, Gid to, Tag tag, Buffer&& buffer);
  Status SendBuffer(Gid from, Gid to, Tag tag, Buffer& buffer);
  // Sends a copy of `payload` (a long message when it fits no class).
  Status SendCopy(Gid from, Gid to, Tag tag, std::span<const std::byte> payload);
  // A multicast's marker (wire/frame.h) from `from` (a thread of this
  // process) to `to` of another process, through the pair's order like a
  // Send: its number in the (from, to) pair, which now stands for a
  // `total` byte message with `tag` carried by process `carrier`, whose
  // fill holds `nonce`. Send's errors (nothing posted); no check of `from`
  // (the caller's).
  Result<uint64_t> PostMarker(Gid from, Gid to, Tag tag, uint64_t total, Gid carrier,
                              uint64_t nonce);
  // A short fill (it fits a class): `payload` to `to` of another process
  // as number `seq` of the (from, to) pair, copied into a pool buffer and
  // posted behind what waits for the process. `from` is a thread of this
  // process (the sender's fallback) or of the one this relays for. Send's
  // errors; no check of `from` (the caller's).
  Status SendFill(Gid from, Gid to, Tag tag, std::span<const std::byte> payload, FillOf fill);
  // Tells `to`'s process that number `seq` of the (from, to) pair, a
  // marker's, gets no fill (a sender's abort: PairOrder::Skip). Best
  // effort, as a long message's abort.
  void PostNoFill(Gid from, Gid to, uint64_t seq);
  // A message from `source` (any gid) put straight into local thread
  // `self`'s mailbox: exit notices. Waits at most a second for a buffer.
  Status DeliverNotice(Gid self, Gid source, Tag tag, std::span<const std::byte> payload);

 private:
  // The destination's queue (PeerOf), its lock, its routes resolved
  // (ResolvePeer), `post(peer)` under the lock, then the queue's
  // back-pressure (AwaitRoom): every numbered post to another process.
  template <typename Post>
  Status PostLocked(Gid to, Post&& post);

  ReceiveSide& receive_;
  PeerRoutes& routes_;
  const Rails& rails_;
  const std::atomic<bool>& shutting_down_;
  const SendLong send_long_;
  Gid process_;               // set by Open
  uint32_t num_classes_ = 0;  // set by Open
};

}  // namespace tocl::runtime
