// PackedWriter (tocl/packed_message.h): fills segments in pool buffers and
// sends them, and by-reference byte ranges, as it goes (FM_send_piece).
#include <fmt/format.h>

#include <cstring>
#include <utility>

#include "buffers/buffer_slot.h"
#include "buffers/slot_ref.h"
#include "runtime/packed_state.h"
#include "runtime/runtime_impl.h"

namespace tocl {

namespace {

using detail::PackedWriterState;
using runtime::packed::Code;

constexpr std::string_view kDroppedBeforeEnd = "the sender dropped the packed message before End";

// A pool buffer for the next segment, started.
Status StartSegment(PackedWriterState& w) {
  TOCL_ASSIGN_OR_RETURN(w.segment, w.runtime->GetBuffer(w.segment_bytes));
  const bool header = w.segments_sent == 0;
  w.builder.Start(std::span(w.segment.data(), w.segment_bytes),
                  header ? runtime::packed::kHeadMagic : runtime::packed::kSegmentMagic,
                  header ? w.stream : w.segments_sent);
  return Status::Ok();
}

// Sends `buffer` (a pool buffer, its length set) as a piece of the stream.
Status SendPiece(PackedWriterState& w, Buffer&& buffer) {
  const Network network = buffer.network();
  buffers::SlotRef slot(buffer.Detach());
  return w.impl->send_side.SendSlot(w.from, w.to, w.stream, slot, network, wire::kFlagPackedPiece);
}

// Sends the current segment (its terminator written): the header as a
// plain message with the writer's tag, the others as pieces.
Status SendSegment(PackedWriterState& w) {
  w.segment.resize(w.builder.size());
  Status sent;
  if (w.segments_sent == 0) {
    sent = w.runtime->Send(w.from, w.to, w.tag, std::move(w.segment));
  } else {
    sent = SendPiece(w, std::move(w.segment));
  }
  w.segment = Buffer();
  ++w.segments_sent;
  ++w.messages;
  return sent;
}

// Sends a by-reference range from the caller's memory: a short message
// (one copy) up to the short maximum, else the zero-copy long path.
Status SendReference(PackedWriterState& w, std::span<const std::byte> bytes) {
  ++w.messages;
  if (bytes.size() <= w.impl->ShortMaxPayload()) {
    TOCL_ASSIGN_OR_RETURN(Buffer copy, w.runtime->GetBuffer(bytes.size()));
    copy.resize(bytes.size());  // within its capacity
    if (!bytes.empty()) std::memcpy(copy.data(), bytes.data(), bytes.size());
    return SendPiece(w, std::move(copy));
  }
  return w.impl->SendLong(w.from, w.to, w.stream, bytes, wire::kFlagPackedPiece);
}

// The writer's state when it can take a piece; its error otherwise.
Status Usable(const std::unique_ptr<PackedWriterState>& state) {
  if (state == nullptr) return FailedPrecondition("an empty PackedWriter (default-made or moved)");
  if (state->ended) return FailedPrecondition("the packed message has ended (End was called)");
  if (!state->broken.ok()) {
    return FailedPrecondition(
        fmt::format("the packed message failed before: {}", state->broken.ToString()));
  }
  return Status::Ok();
}

// Records a failure: the writer is broken from now on.
Status Broken(PackedWriterState& w, Status status) {
  if (!status.ok() && w.broken.ok()) {
    w.broken = status;
    w.segment = Buffer();
  }
  return status;
}

// Adds an item with `add` (false: no room), sending the full segment
// first (it continues in the next) when it does not fit.
template <typename Add>
Status AddItem(PackedWriterState& w, Add&& add) {
  if (!w.segment.valid()) TOCL_RETURN_IF_ERROR(Broken(w, StartSegment(w)));
  if (!add()) {
    w.builder.EndWith(Code::kContinue);
    TOCL_RETURN_IF_ERROR(Broken(w, SendSegment(w)));
    TOCL_RETURN_IF_ERROR(Broken(w, StartSegment(w)));
    if (!add()) return Internal("a piece does not fit an empty segment");
  }
  ++w.pieces;
  return Status::Ok();
}

}  // namespace

PackedWriter::PackedWriter() = default;

PackedWriter::PackedWriter(std::unique_ptr<detail::PackedWriterState> state)
    : state_(std::move(state)) {}

PackedWriter::PackedWriter(PackedWriter&& other) noexcept = default;

PackedWriter& PackedWriter::operator=(PackedWriter&& other) noexcept {
  if (this != &other) {
    PackedWriter gone(std::move(*this));  // an unfinished one aborts here
    state_ = std::move(other.state_);
  }
  return *this;
}

PackedWriter::~PackedWriter() {
  if (state_ == nullptr || state_->ended || state_->segments_sent == 0) return;
  // Some of it left: the reader must learn that no more comes, rather than
  // wait for it. Best effort (the receiver may be what failed).
  PackedWriterState& w = *state_;
  w.segment = Buffer();
  if (!StartSegment(w).ok()) return;
  w.builder.EndWithAbort(w.broken.ok()
                             ? std::string(kDroppedBeforeEnd)
                             : fmt::format("{} ({})", kDroppedBeforeEnd, w.broken.ToString()),
                         w.by_reference_from);
  (void)SendSegment(w);
}

Status PackedWriter::PackValue(PackedType type, const void* data, size_t size) {
  TOCL_RETURN_IF_ERROR(Usable(state_));
  PackedWriterState& w = *state_;
  return AddItem(w, [&] { return w.builder.AddValue(type, data, size); });
}

Status PackedWriter::PackBytes(std::span<const std::byte> bytes) {
  TOCL_RETURN_IF_ERROR(Usable(state_));
  PackedWriterState& w = *state_;
  if (bytes.size() < w.by_reference_from) {
    return AddItem(w, [&] { return w.builder.AddInline(bytes); });
  }
  if (bytes.size() > kMaxMessageBytes) {
    return InvalidArgument(fmt::format("a {} byte range is larger than the limit of {} bytes",
                                       bytes.size(), kMaxMessageBytes));
  }
  // The segment says the range comes next, and leaves before it (the
  // header reaches its handler while the body is on its way).
  if (!w.segment.valid()) TOCL_RETURN_IF_ERROR(Broken(w, StartSegment(w)));
  w.builder.EndWithReference(bytes.size());
  TOCL_RETURN_IF_ERROR(Broken(w, SendSegment(w)));
  TOCL_RETURN_IF_ERROR(Broken(w, SendReference(w, bytes)));
  ++w.pieces;
  return Status::Ok();
}

Status PackedWriter::End() {
  TOCL_RETURN_IF_ERROR(Usable(state_));
  PackedWriterState& w = *state_;
  if (!w.segment.valid()) TOCL_RETURN_IF_ERROR(Broken(w, StartSegment(w)));
  w.builder.EndWith(Code::kEnd);
  TOCL_RETURN_IF_ERROR(Broken(w, SendSegment(w)));
  w.ended = true;
  return Status::Ok();
}

size_t PackedWriter::pieces() const {
  return state_ != nullptr ? state_->pieces : 0;
}

size_t PackedWriter::messages_sent() const {
  return state_ != nullptr ? state_->messages : 0;
}

}  // namespace tocl
