// One accepted tcp connection: a peer process sending to us.
//
// The stream is read through a staging buffer (many small frames per
// recv()); a frame too big to stage is read straight into its pool buffer.
// The first frames are the handshake (security/handshake.h): a hello
// naming the peer process (and us as its destination) with its nonce, our
// answer (written at once: a fresh socket's buffer takes it whole), and the
// peer's proof; then the peer's kResume, naming its stream and the frame
// it goes on with (received_streams.h: a stream outlives its connections),
// answered at once with our kReceived count; after it, only frames from
// that process to this process. Anything else closes the connection with
// one warning, and the process goes on; nothing is delivered before the
// resume.
//
// Acknowledgements: every frame handed to the sink counts as received.
// The count rides on our own frames to the peer when we send it any
// (reverse_acks.h); what they have not carried goes back in a kReceived
// header on this socket after kReportFrames frames or kReportBytes bytes,
// else once the poller sees it owed for kReportDelay, and always before
// the poller sleeps (TcpSubsystem::Poll, PrepareToSleep): the sender's
// window is bounded, so an acknowledgement must never wait for a timer
// that a sleeping process does not run. The peer's counts for our own
// stream to it may come on this connection too, in front of its frames:
// they go to the subsystem (ConnectionContext::reverse_acknowledged).
//
// Flow control: when the sink is congested or the pool has no buffer, the
// connection stops reading (its fd leaves the epoll set, so a sleeping
// poller does not spin on it) until TryResume succeeds; the sender's socket
// and then its queue fill up meanwhile. Nothing is dropped.
//
// Threading: polling thread only (OnReady, TryResume, Close). A closed
// connection stays allocated until its owner frees it between epoll
// batches, so events of the current batch that still name it are harmless.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "buffers/buffer_slot.h"
#include "security/handshake.h"
#include "subsystem/reactor.h"
#include "subsystem/tcp/connection_context.h"
#include "subsystem/tcp/received_streams.h"
#include "subsystem/tcp/reverse_acks.h"
#include "subsystem/tcp/socket.h"
#include "tocl/gid.h"
#include "wire/frame.h"

namespace tocl::subsystem::tcp {

class InboundConnection final : public subsystem::FdHandler {
 public:
  // Bytes of stream staged per connection.
  static constexpr size_t kStagingBytes = 64 << 10;
  // Frames bigger than this that are not staged whole are read straight into
  // their pool buffer (one copy instead of two).
  static constexpr size_t kDirectReadBytes = 16 << 10;

  InboundConnection(ConnectionContext& context, Fd fd, std::string peer_address);
  ~InboundConnection() override;
  InboundConnection(const InboundConnection&) = delete;
  InboundConnection& operator=(const InboundConnection&) = delete;

  // Registers the fd with the reactor.
  Status Start();

  void OnReady(uint32_t events) override;

  // For a paused connection: delivers what is staged and starts reading
  // again. False while still blocked (congested sink, pool at its cap).
  bool TryResume();

  // Frames or bytes received since the last report at which one is sent
  // at once.
  static constexpr uint64_t kReportFrames = 64;
  static constexpr size_t kReportBytes = 256 << 10;
  // The longest a report waits while the poller runs.
  static constexpr std::chrono::microseconds kReportDelay{200};
  // Sends the owed kReceived when it is due at `now` (owed for
  // kReportDelay; always with `now` = time_point::max()). Polling thread.
  void ReportIfDue(std::chrono::steady_clock::time_point now);

  // Closes the fd (removing it from the reactor) and gives back a partly
  // read buffer. `reason` is logged as a warning unless empty.
  void Close(std::string_view reason);

  bool closed() const { return !fd_.valid(); }
  bool paused() const { return paused_; }
  // The peer proved it holds the cluster's secret.
  bool authenticated() const { return authenticated_; }
  Gid peer_process() const { return hello_process_; }
  const std::string& peer_address() const { return peer_address_; }
  std::chrono::steady_clock::time_point accepted_at() const { return accepted_at_; }

 private:
  enum class Progress { kMore, kBlocked, kClosed };

  // Reads and delivers until the socket has nothing more, a budget of
  // reads is spent, delivery is blocked or the connection closed.
  void ReadSome();
  // Reads into the pool buffer of a frame too big to stage.
  Progress ReadDirect();
  // Delivers every whole staged frame.
  Progress DeliverStaged();
  // Checks one header against the connection's state; closes on error.
  bool Admit(const wire::Header& header);
  // A whole hello or proof; false when it closed the connection.
  bool OnHandshake(const wire::Header& header, const std::byte* payload);
  // The peer's kResume: attaches the connection to its stream and answers
  // with the stream's count. False when it closed the connection.
  bool OnResume(const wire::Header& header);
  // After a batch of frames: reports now if enough came, else owes it.
  void NoteReceived();
  // Writes a kReceived with the stream's count (continuing one half
  // written) unless our frames to the peer carried it already and
  // `always` is false; false when the socket takes none of it now.
  bool Report(bool always = false);
  void SetReportOwed(bool owed);
  // False when the sink refused the frame (the connection is then closed).
  bool Deliver(detail::BufferSlot* slot);
  void Pause();
  // Handles a recv() that returned 0 or failed; always closes.
  void OnReadEnd(ssize_t n, int error);

  ConnectionContext& context_;
  Fd fd_;
  const std::string peer_address_;
  const std::chrono::steady_clock::time_point accepted_at_;
  Gid hello_process_;                                     // null until the hello
  std::optional<security::AcceptorHandshake> handshake_;  // between hello and proof
  bool authenticated_ = false;

  std::unique_ptr<std::byte[]> staging_;
  size_t begin_ = 0;  // first staged byte not yet consumed
  size_t end_ = 0;    // one past the last staged byte

  // A frame being read straight into its pool buffer.
  detail::BufferSlot* direct_ = nullptr;
  size_t direct_filled_ = 0;  // bytes of the frame (header included) in place
  size_t direct_bytes_ = 0;   // the whole frame

  bool paused_ = false;

  // The stream this connection carries (after the resume).
  ReceivedStream* stream_ = nullptr;
  // What our frames to the peer carry of the count (after the resume).
  std::shared_ptr<ReverseAck> reverse_;
  bool report_owed_ = false;
  // When the poller first saw the report owed (its timer starts then, so
  // that the read path reads no clock).
  std::chrono::steady_clock::time_point owed_since_{};
  std::array<std::byte, wire::kHeaderBytes> report_{};
  size_t report_written_ = wire::kHeaderBytes;  // nothing half written
  uint64_t reporting_ = 0;                      // the count in report_
};

}  // namespace tocl::subsystem::tcp
