// The sending side of long messages (long_message.h tells the protocol).
// A sending thread's Send runs the whole conversation itself: the start in
// its pair's order, probes while the grant is missing, fragments placed by
// the fragment scheduler over the peer's networks, until every fragment is
// acknowledged or the message fails. The poller hands it the receiver's
// answers (OnControl), and it wakes the sending thread. The same steps
// (Begin, Step, End) let one thread carry many sends at once (Isend:
// background_sends.h).
//
// What it needs of the runtime goes through Events (the peer's routes
// opened, networks' names and failure counts, the poller listening for
// bells); frames go through the destination's SendQueue, the sender waits
// through the ReceiveSide (polling for its answers when nobody else does).
//
// Threading and lock order: a sending thread holds its peer's mu() while it
// posts and places fragments, never while it waits. mu_ (the table of
// messages being sent) is taken under a peer's mu() (Send registering its
// message under the pair's lane lock too, and removing it) and by the
// poller (OnControl, which takes no peer lock); a message's LongSend::mu
// under either. So peer mu() -> lane lock -> mu_ -> LongSend::mu, and peer
// mu() -> LongSend::mu.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/long_message.h"
#include "runtime/receive_side.h"
#include "runtime/send_queue.h"
#include "tocl/gid.h"
#include "tocl/status.h"
#include "wire/frame.h"

namespace tocl::runtime {

class LongSender {
 public:
  using Clock = std::chrono::steady_clock;

  struct Limits {
    // A network that acknowledges nothing for this long is failed for the
    // peer; a missing grant is probed for this often (at most).
    std::chrono::milliseconds fragment_timeout{1000};
    // A message nothing is heard about for this long fails.
    std::chrono::milliseconds partial_timeout{10000};
  };

  // What the sender asks of the runtime. Called by the sending thread.
  class Events {
   public:
    virtual ~Events() = default;
    // Opens the routes of `peer` if they are not (`lock` holds peer.mu();
    // it may be released while the directory is waited for): its error
    // fails the send.
    virtual Status ResolveLocked(SendQueue& peer, std::unique_lock<std::mutex>& lock) = 0;
    // Network `network` (an index into the runtime's rails, PeerRail::rail)
    // as log lines name it, and its failure count (a peer's route over it
    // broke or went silent).
    virtual std::string NetworkName(int network) const = 0;
    virtual void NetworkFailed(int network) = 0;
    // A sender waits for something only a bell announces (a shm peer
    // providing buffers): the poller must hear bells. Calls nest.
    virtual void ListenForBells(bool on) = 0;
  };

  // `receive`, `shutting_down` (ends every send) and `events` must outlive
  // this.
  LongSender(Limits limits, ReceiveSide& receive, const std::atomic<bool>& shutting_down,
             Events& events);
  LongSender(const LongSender&) = delete;
  LongSender& operator=(const LongSender&) = delete;

  // The fragment size (the largest pool class's payload), known once the
  // runtime's pools are; set before any send.
  void SetFragmentBytes(uint64_t bytes) { fragment_bytes_ = bytes; }

  // Sends `payload` from local thread `from` to thread `to` of the process
  // of `peer` (not this one): Ok once the receiver acknowledged every
  // fragment. Blocks; `payload` must stay as it is until it returns. On
  // failure the receiver is told (best effort). `flags`: the start's wire
  // header flags (wire::kFlagPackedPiece for a packed message's piece).
  Status Send(SendQueue& peer, Gid from, Gid to, Tag tag, std::span<const std::byte> payload,
              uint16_t flags = 0);

  // Send of a multicast's fill (wire/frame.h): number `seq` of the
  // (from, to) pair, whose marker `from`'s process posted; `from` is a
  // thread of this process (the sender's fallback) or of another one, for
  // which this one carries the message. Every frame of it carries
  // wire::kFlagRelayed, its start `nonce` (the marker's). `wake` is signalled when the receiver
  // answers (the carrying thread's mailbox).
  Status SendFill(SendQueue& peer, Gid from, Gid to, Tag tag, std::span<const std::byte> payload,
                  uint64_t seq, uint64_t nonce, Mailbox& wake);

  // Send in steps, for a thread that carries several sends at once
  // (background_sends.h): Begin numbers and posts the start (the message
  // takes its place among the thread's sends to `to` now) and registers
  // `send`, which must stay where it is until End; `wake` is signalled when
  // something is heard about it. Step does one round (probe, place
  // fragments) and returns the outcome once there is one; wait on `wake`
  // for up to StepWait() between rounds, with ListenForBells on. End tells
  // the receiver of a failure and unregisters `send`. On an error from
  // Begin there is nothing to end.
  Status Begin(SendQueue& peer, Gid from, Gid to, Tag tag, std::span<const std::byte> payload,
               Mailbox* wake, LongSend& send, uint16_t flags = 0);
  std::optional<Status> Step(SendQueue& peer, LongSend& send);
  void End(SendQueue& peer, LongSend& send, const Status& result);
  Clock::duration StepWait() const;
  void ListenForBells(bool on) { events_.ListenForBells(on); }

  // The poller: a receiver's grant, acknowledgement, abort or answer to a
  // probe (!FromSender(header)) that came from `from_process`. One about no
  // message being sent (it finished), or from a process other than the
  // receiver's, is dropped.
  void OnControl(Gid from_process, const wire::Header& header);

 private:
  // Send's steps after Begin: Step until an outcome, waiting on
  // send.wake between rounds, then End.
  Status Carry(SendQueue& peer, LongSend& send);
  // Out of the table (the poller no longer finds it).
  void Unregister(LongSend& send);
  // One round of the fragment scheduler for `send` (its mu held): failed
  // networks, then fragments posted until the windows are full.
  Status PlaceFragmentsLocked(SendQueue& peer, LongSend& send, Clock::time_point now);
  // The failures the scheduler found this round, logged and counted.
  void ReportFailuresLocked(SendQueue& peer,
                            const std::vector<FragmentScheduler::Failure>& failures, bool any_live);
  // What this message taught about each network, for the next message
  // (the peer's routes are the same: its generation held).
  void LearnLocked(SendQueue& peer, LongSend& send);
  // Asks the receiver what became of long message `key`, over the peer's
  // usable networks in turn (round `round`).
  void ProbeLocked(SendQueue& peer, const LongSend& send, size_t round, Clock::time_point now);
  // A control frame from the sending thread of long message `key` to its
  // receiver (abort, probe) on the peer's route `route` (an index into
  // peer.rails()).
  void PostControlLocked(SendQueue& peer, int route, wire::FrameKind kind, const LongSend& send,
                         Tag tag);

  const Limits limits_;
  ReceiveSide& receive_;
  const std::atomic<bool>& shutting_down_;
  Events& events_;
  uint64_t fragment_bytes_ = 0;

  std::mutex mu_;
  // Guarded by mu_: the messages being sent, each its sending thread's.
  std::unordered_map<LongKey, LongSend*, LongKeyHash> outbound_;
};

}  // namespace tocl::runtime
