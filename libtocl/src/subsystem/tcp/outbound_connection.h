// The connection behind a tcp Route: this process sending to one peer
// process over one network, as one stream of frames that outlives the
// socket carrying it (send_window.h).
//
// A socket starts with the handshake (security/handshake.h: our hello with
// our nonce, the peer's answer, checked, then our proof), followed by our
// kResume (this stream, from our first frame not acknowledged); the peer's
// first kReceived answers it with where to resume. Then the frames are
// written in order, up to 64 per sendmsg(), and each stays in the window
// until a kReceived from the peer covers it: only then is it kSent.
//
// A socket that breaks (reset, closed, killed) is not a dead peer: the
// connection is down, connects again at once and then with backoff (1 ms
// doubling to 1 s), and writes again what the peer has not acknowledged.
// Frames posted meanwhile wait in the window. The route is broken for good
// (every frame held kFailed) only when it has been down for
// `unreachable_timeout`, when no tocl process of this cluster answers
// before the stream was ever resumed (refused, closed during the
// handshake or no answer to it, a failed handshake), when the peer breaks
// the protocol, or by Shutdown (the runtime learned that the process
// exited, or dropped the route). A down
// connection with nothing to send connects again only when a frame is
// posted: a peer that closed its connections on its way out is not called
// back.
//
// Acknowledgements ride both ways (reverse_acks.h): what the peer's
// stream to us is owed goes in front of our frames as a kReceived header,
// and the peer's counts of this stream come on its socket or on the peer's
// own connection to us (OnReverseAcknowledged).
//
// Ownership: the TcpSubsystem owns it; the TcpRoute handle the runtime
// holds only points at it. Frames are owned by the window.
//
// Threading: everything is guarded by mu_: senders call Post and Take (one
// at a time per route, under the runtime's destination lock) while the
// polling thread handles socket events and Tick. Nothing here blocks on the
// network.
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "buffers/buffer_slot.h"
#include "security/handshake.h"
#include "subsystem/reactor.h"
#include "subsystem/tcp/connection_context.h"
#include "subsystem/tcp/reverse_acks.h"
#include "subsystem/tcp/send_window.h"
#include "subsystem/tcp/socket.h"
#include "tocl/gid.h"
#include "tocl/status.h"
#include "wire/frame.h"

namespace tocl::subsystem::tcp {

class OutboundConnection final : public subsystem::FdHandler {
 public:
  using Clock = std::chrono::steady_clock;
  // Frames gathered into one sendmsg() call.
  static constexpr size_t kMaxFramesPerWrite = 64;

  OutboundConnection(ConnectionContext& context, Gid peer_process, const SocketAddress& address);
  ~OutboundConnection() override;
  OutboundConnection(const OutboundConnection&) = delete;
  OutboundConnection& operator=(const OutboundConnection&) = delete;

  // Creates the socket and starts connecting. A connection the peer refuses
  // is not an error here: the route is Broken() and Post says why. Errors:
  // no socket (ResourceExhausted for fd limits), the reactor refused the fd.
  Status Start();

  // Route::Post: Ok (taken, now kInFlight; it waits in the window while the
  // connection is down), TryAgain (the window holds
  // max_queued_bytes_per_route already; not taken), Unavailable (broken for
  // good; not taken), InvalidArgument (the header's length does not fit the
  // slot; not taken).
  Status Post(detail::BufferSlot* slot);
  // Nothing is waiting to be written or acknowledged.
  bool Drained() const;
  bool Broken() const;
  // The socket is lost and not replaced yet (the route may come back).
  bool Down() const;
  // While no socket carries the stream (down, or a new one not resumed
  // yet): every frame not acknowledged, oldest first, each with its
  // reference, for another network. Empty otherwise.
  std::vector<detail::BufferSlot*> Take();

  void OnReady(uint32_t events) override;

  // Fails every frame held and closes the socket, quietly (the subsystem
  // is closing, or the runtime dropped the route). Any thread.
  void Shutdown(std::string_view why);

  Gid peer_process() const { return peer_process_; }
  const SocketAddress& address() const { return address_; }

  // The polling thread's timers: a handshake unanswered within
  // `handshake_timeout` loses the socket; a down connection connects again
  // when due, or breaks for good after unreachable_timeout. Returns when it
  // wants the next Tick (Clock::time_point::max(): no need).
  Clock::time_point Tick(Clock::time_point now);
  // Whether the connection went down since the last call (for the
  // runtime, which may move its frames to another network).
  bool TakeWentDown();

  // The peer's kReceived for this stream that came on its own connection
  // to us (polling thread). A count behind what we know is old news; one
  // past what was ever written breaks the route (a broken peer).
  void OnReverseAcknowledged(const wire::Header& header);
  uint64_t stream_id() const { return stream_id_; }

 private:
  enum class State {
    kConnecting,   // connect() in progress
    kHandshaking,  // hello written or being written, waiting for the answer
    kResuming,     // proof and kResume written or being written, waiting for kReceived
    kConnected,
    kDown,  // no socket; next_attempt_ says when to connect again
    kBroken,
  };
  // The hello: a header and our nonce; the proof: a header and our MAC,
  // then the kResume header.
  static constexpr size_t kPreambleBytes = 2 * wire::kHeaderBytes + wire::kHandshakeMacBytes;
  static constexpr size_t kAnswerBytes =
      wire::kHeaderBytes + wire::kHandshakeNonceBytes + wire::kHandshakeMacBytes;
  // kReceived headers read per recv().
  static constexpr size_t kReadBytes = 16 * wire::kHeaderBytes;

  // A socket for the stream, connecting. A failed connect loses it
  // (LoseLocked); an error (no socket, no reactor) is returned.
  Status ConnectLocked();
  // ConnectLocked when down: an error loses the attempt too.
  void ReconnectLocked();
  // Writes as much as the socket takes, then (de)registers EPOLLOUT.
  void FlushLocked();
  void UpdateInterestLocked();
  // Records whether EPOLLOUT is in the mask (want_write_), and whether the
  // connection waits for an fd event (EPOLLOUT, the connect, the handshake
  // answer or the resume) in the context's count of waiting connections.
  void SetWantWriteLocked(bool want);
  // Reads what the peer sent: its handshake answer, then kReceived frames.
  void ReadLocked();
  // The whole answer is in: checks it, puts our proof and kResume in the
  // preamble.
  void OnAnswerLocked();
  // A kReceived (count `count`): frames leave the window; the first after
  // a kResume also says where writing resumes.
  void OnReceivedLocked(const wire::Header& header);
  // The highest count the peer may acknowledge now (kReceived while
  // resuming or connected, a reverse acknowledgement in any state).
  uint64_t PeerMayHaveLocked() const;
  // A count the peer cannot have sent honestly: broken for good.
  void BreakAcknowledgedLocked(const wire::Header& header);
  void SetHelloLocked();
  // Acknowledgements read from the socket by a sender whose window is full
  // (when the poller does not look at this socket every round).
  void ReadAcknowledgementsLocked();
  // How a socket was lost. kNobodyThere (refused, closed during or no
  // answer to the handshake) breaks a route whose stream was never
  // resumed: no tocl process of this cluster is there.
  enum class Loss { kTransient, kNobodyThere };
  // The socket is lost: down (connecting again), or broken for good for
  // kNobodyThere before the first resume.
  void LoseLocked(std::string reason, Loss loss = Loss::kTransient);
  void CloseSocketLocked();
  // The route is broken for good: closes the socket and fails the window.
  void BreakLocked(std::string reason, bool warn);
  void SetDownLocked(bool down);
  // A socket is being set up: connecting, in the handshake or resuming.
  bool SettingUp() const {
    return state_ == State::kConnecting || state_ == State::kHandshaking ||
           state_ == State::kResuming;
  }

  ConnectionContext& context_;
  const Gid peer_process_;
  const SocketAddress address_;
  const std::string description_;  // "h1.p3 at 127.0.0.1:4000", for messages
  const uint64_t stream_id_;       // random, never 0

  mutable std::mutex mu_;
  // Guarded by mu_ (so that no sender writes to an fd number being reused):
  Fd fd_;
  State state_ = State::kConnecting;
  std::string broken_reason_;
  std::optional<security::ConnectorHandshake> handshake_;  // until the answer
  Clock::time_point handshake_started_;
  std::array<std::byte, kPreambleBytes> preamble_{};
  size_t preamble_bytes_ = 0;    // of the current preamble (hello, or proof + resume)
  size_t preamble_written_ = 0;  // of preamble_bytes_
  std::array<std::byte, kReadBytes> in_{};
  size_t in_filled_ = 0;
  SendWindow window_;
  // The count we owe the peer for its stream to us, carried in front of
  // our frames (reverse_acks.h), and the kReceived header carrying it while
  // it is being written.
  const std::shared_ptr<ReverseAck> reverse_;
  std::array<std::byte, wire::kHeaderBytes> ack_out_{};
  size_t ack_written_ = wire::kHeaderBytes;  // nothing to write
  uint64_t ack_stream_ = 0;
  uint64_t ack_count_ = 0;
  bool resumed_once_ = false;  // a socket got as far as the peer's resume answer
  // Down: since when (for unreachable_timeout), how many attempts failed
  // since, and when the next one is due.
  Clock::time_point down_since_;
  int attempts_ = 0;
  Clock::time_point next_attempt_ = Clock::time_point::max();
  bool went_down_ = false;        // not yet reported (TakeWentDown)
  bool counted_down_ = false;     // counted in ConnectionContext::down
  bool want_write_ = false;       // EPOLLOUT is in the epoll mask
  bool counted_waiting_ = false;  // counted in ConnectionContext::waiting
};

}  // namespace tocl::subsystem::tcp
