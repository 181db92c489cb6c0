// PackedReader (tocl/packed_message.h): walks the segments of a packed
// message, receiving each further segment and each by-reference range (the
// pieces: wire::kFlagPackedPiece, the stream's tag, from the sending
// thread) as it reaches them. A by-reference range is received through a
// receive posted into the caller's memory (posted_receive.h), to which the
// long receiver binds the range's fragments: it lands in place. Waits end
// with an error when the sender exits (ExitedSenders, asked whenever the
// wait wakes: at least once a second; the directory, when a wait has found
// nothing there for a second, and every 5 s after).
#include <fmt/format.h>

#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/packed_state.h"
#include "runtime/posted_receive.h"
#include "runtime/runtime_impl.h"

namespace tocl {

namespace {

using Clock = std::chrono::steady_clock;
using detail::PackedReaderState;
using runtime::packed::Code;
using runtime::packed::Item;

runtime::Selector PieceSelector(const PackedReaderState& r) {
  runtime::Selector selector{r.source, TagMatch(r.stream)};
  selector.pieces = true;
  return selector;
}

// What one wait knows of the sender: whether what it sent was drained, and
// when to ask the directory next.
struct SenderWatch {
  // ExitedSenders keeps the last exits only: a wait that has found nothing
  // there for a while asks the directory (a daemon round trip, so not at
  // every wake).
  static constexpr auto kFirstAsk = std::chrono::seconds(1);
  static constexpr auto kAskEvery = std::chrono::seconds(5);
  bool drained = false;
  Clock::time_point ask_at = Clock::now() + kFirstAsk;
};

// Why the sender is gone, if the table or (when due) the directory says so.
std::optional<std::string> GoneReason(PackedReaderState& r, SenderWatch& watch) {
  std::optional<std::string> reason = r.impl->exited_senders.Gone(r.source);
  if (reason || Clock::now() < watch.ask_at) return reason;
  watch.ask_at = Clock::now() + SenderWatch::kAskEvery;
  // The thread's entry says it (a process's exit marks its threads); its
  // process only when the directory does not know the thread yet (a
  // registration still in flight). Any other failure (daemon away) is
  // asked again later.
  Gid gid = r.source;
  auto entity = r.impl->daemons->Lookup(gid);
  if (!entity.ok() && entity.status().code() == StatusCode::kNotFound) {
    gid = r.source.process();
    entity = r.impl->daemons->Lookup(gid);
  }
  if (!entity.ok() || entity->state != EntityState::kExited) return std::nullopt;
  std::string why = entity->exit_reason.empty() ? "exited" : entity->exit_reason;
  r.impl->exited_senders.Note(gid, why);
  return why;
}

// Unavailable when the sender is gone; first delivering whatever it sent
// that reached this process (so that a piece already here wins).
Status SenderGone(PackedReaderState& r, SenderWatch& watch) {
  std::optional<std::string> reason = GoneReason(r, watch);
  if (!reason) return Status::Ok();
  if (!watch.drained) {
    watch.drained = true;
    r.impl->DeliverArrivedFrom(r.source, *reason);
    return Status(StatusCode::kTryAgain, "look again");
  }
  return Unavailable(fmt::format(
      "its sender {} exited before piece {} of the packed message (tag {}) arrived ({})",
      r.source.ToString(), r.piece, r.info.tag, *reason));
}

// The next segment's message.
Status ReceiveSegment(PackedReaderState& r) {
  TOCL_ASSIGN_OR_RETURN(runtime::Mailbox * mailbox, r.impl->receive.LocalMailbox(r.self));
  // Asked after each look at the mailbox: the first time the sender is
  // seen gone, what it sent is drained and the wait goes on (the next look
  // comes with the drain's delivery, or within a second); then it fails.
  SenderWatch watch;
  auto check = [&]() -> Status {
    Status gone = SenderGone(r, watch);
    return gone.code() == StatusCode::kTryAgain ? Status::Ok() : gone;
  };
  Result<Buffer> got =
      r.impl->receive.ReceiveOn(*mailbox, PieceSelector(r), Clock::time_point::max(), check);
  if (!got.ok()) return got.status();
  TOCL_ASSIGN_OR_RETURN(runtime::packed::Segment segment,
                        runtime::packed::ParseSegment(got->span()));
  if (segment.magic != runtime::packed::kSegmentMagic || segment.number != r.next_number) {
    return DataLoss(fmt::format("segment {} of the packed message from {} came as segment {}",
                                r.next_number, r.source.ToString(), segment.number));
  }
  r.message = std::move(*got);
  r.segment = std::move(segment);
  r.at = 0;
  ++r.next_number;
  r.need_segment = false;
  return Status::Ok();
}

// A by-reference range into `out` (its exact length).
Status ReceiveReference(PackedReaderState& r, std::span<std::byte> out) {
  TOCL_ASSIGN_OR_RETURN(runtime::Mailbox * mailbox, r.impl->receive.LocalMailbox(r.self));
  runtime::PostedReceive post;
  post.selector = PieceSelector(r);
  post.into = true;
  post.out = out;
  r.impl->receive.Post(*mailbox, post);
  SenderWatch watch;
  Status gone;
  Status waited = r.impl->receive.Await(*mailbox, Clock::time_point::max(), true, [&] {
    if (post.done.load(std::memory_order_acquire)) return true;
    gone = SenderGone(r, watch);
    if (gone.code() == StatusCode::kTryAgain) {
      gone = Status::Ok();  // drained: the piece may be here now
      return post.done.load(std::memory_order_acquire);
    }
    return !gone.ok();
  });
  if (!post.done.load(std::memory_order_acquire)) {
    if (waited.ok()) waited = gone;
    // Withdrawn before it goes out of scope; it may have completed since.
    if (r.impl->receive.Withdraw(*mailbox, post)) return waited;
  }
  const bool in_place = post.slot == nullptr;
  TOCL_ASSIGN_OR_RETURN(MessageInfo info, r.impl->receive.FinishInto(post));
  if (info.size != out.size()) {
    // A writer whose by-reference send failed ends the message with an
    // abort segment, which this receive took in place of the range (an
    // abort segment is always shorter than a range): its reason is the
    // error.
    if (info.size < out.size()) {
      auto reason = runtime::packed::AbortReason(out.first(info.size), r.next_number);
      if (reason) return FailedPrecondition(fmt::format("piece {}: {}", r.piece, *reason));
    }
    return DataLoss(
        fmt::format("piece {}: a {} byte range came as {} bytes", r.piece, out.size(), info.size));
  }
  (in_place ? r.bytes_in_place : r.bytes_copied) += out.size();
  return Status::Ok();
}

// The item of the next piece, receiving the next segment when needed;
// OutOfRange at the end.
Result<const Item*> Current(PackedReaderState& r) {
  TOCL_RETURN_IF_ERROR(r.failed);
  for (;;) {
    if (r.need_segment) {
      if (r.header_only) {
        return FailedPrecondition(
            fmt::format("piece {} is not in the header segment (a header function reads only the "
                        "pieces packed before the first by-reference range or the first full "
                        "segment)",
                        r.piece));
      }
      Status received = ReceiveSegment(r);
      if (!received.ok()) {
        r.failed = received;
        return received;
      }
    }
    const Item& item = r.segment.items[r.at];
    switch (item.code) {
      case Code::kContinue:
        r.need_segment = true;
        continue;
      case Code::kEnd:
        r.ended = true;
        return Status(
            StatusCode::kOutOfRange,
            fmt::format("piece {}: past the end of the message ({} pieces)", r.piece, r.piece));
      case Code::kAbort:
        r.failed = FailedPrecondition(fmt::format(
            "piece {}: {}", r.piece,
            std::string_view(reinterpret_cast<const char*>(item.data.data()), item.data.size())));
        return r.failed;
      default:
        return &item;
    }
  }
}

PackedPiece PieceOf(const PackedReaderState& r, const Item& item) {
  return PackedPiece{.index = r.piece,
                     .type = item.type(),
                     .length = item.length,
                     .by_reference = item.code == Code::kReference};
}

std::string Describe(const Item& item) {
  return fmt::format("{} ({} bytes{})", PackedTypeName(item.type()), item.length,
                     item.code == Code::kReference ? ", by reference" : "");
}

// The piece is used: on to the next.
void Consumed(PackedReaderState& r, const Item& item) {
  ++r.piece;
  if (item.code == Code::kReference) {
    r.need_segment = true;  // the range was the message after the segment's end
  } else {
    ++r.at;
  }
}

Status Empty() {
  return FailedPrecondition("an empty PackedReader (default-made or moved)");
}

}  // namespace

PackedReader::PackedReader() = default;

PackedReader::PackedReader(std::unique_ptr<detail::PackedReaderState> state)
    : state_(std::move(state)) {}

PackedReader::PackedReader(PackedReader&& other) noexcept = default;

PackedReader& PackedReader::operator=(PackedReader&& other) noexcept {
  if (this != &other) {
    PackedReader gone(std::move(*this));  // discards the rest of an unfinished one
    state_ = std::move(other.state_);
  }
  return *this;
}

PackedReader::~PackedReader() {
  if (state_ != nullptr) (void)Discard();
}

const MessageInfo& PackedReader::info() const {
  static const MessageInfo kNone;
  return state_ != nullptr ? state_->info : kNone;
}

Result<PackedPiece> PackedReader::Peek() {
  if (state_ == nullptr) return Empty();
  TOCL_ASSIGN_OR_RETURN(const Item* item, Current(*state_));
  return PieceOf(*state_, *item);
}

Status PackedReader::UnpackValue(PackedType type, void* out, size_t size) {
  if (state_ == nullptr) return Empty();
  PackedReaderState& r = *state_;
  TOCL_ASSIGN_OR_RETURN(const Item* item, Current(r));
  if (!item->is_value() || item->type() != type) {
    return InvalidArgument(fmt::format("piece {}: expected {} ({} bytes), found {}", r.piece,
                                       PackedTypeName(type), size, Describe(*item)));
  }
  std::memcpy(out, item->data.data(), size);
  Consumed(r, *item);
  return Status::Ok();
}

Result<size_t> PackedReader::UnpackBytes(std::span<std::byte> out) {
  if (state_ == nullptr) return Empty();
  PackedReaderState& r = *state_;
  TOCL_ASSIGN_OR_RETURN(const Item* item, Current(r));
  if (item->is_value()) {
    return InvalidArgument(
        fmt::format("piece {}: expected bytes, found {}", r.piece, Describe(*item)));
  }
  if (item->length > out.size()) {
    return InvalidArgument(fmt::format("piece {}: a {} byte range does not fit the {} bytes given",
                                       r.piece, item->length, out.size()));
  }
  const auto length = static_cast<size_t>(item->length);
  if (item->code == Code::kReference) {
    if (r.header_only) {
      return FailedPrecondition(
          fmt::format("piece {} is not in the header segment (a by-reference range)", r.piece));
    }
    Status received = ReceiveReference(r, out.first(length));
    if (!received.ok()) {
      r.failed = received;
      return received;
    }
  } else {
    if (length != 0) std::memcpy(out.data(), item->data.data(), length);
    r.bytes_copied += length;
  }
  Consumed(r, *item);
  return length;
}

bool PackedReader::at_end() {
  if (state_ == nullptr) return true;
  if (state_->ended) return true;
  (void)Current(*state_);
  return state_->ended;
}

Status PackedReader::Discard() {
  if (state_ == nullptr) return Empty();
  PackedReaderState& r = *state_;
  r.header_only = false;
  for (;;) {
    Result<const Item*> item = Current(r);
    if (!item.ok()) return r.ended ? Status::Ok() : item.status();
    if ((*item)->code == Code::kReference) {
      // Its sender waits for a receive posted into memory: give it some.
      // The length comes from the network (ParseSegment caps it at
      // kMaxMessageBytes), and this runs in the noexcept destructor: an
      // allocation that fails is an error, not an exception.
      const size_t length = static_cast<size_t>((*item)->length);
      std::unique_ptr<std::byte[]> scratch(new (std::nothrow) std::byte[length]);
      if (scratch == nullptr) {
        r.failed = ResourceExhausted(
            fmt::format("no memory for the {} bytes of piece {} to be discarded", length, r.piece));
        return r.failed;
      }
      TOCL_RETURN_IF_ERROR(UnpackBytes(std::span(scratch.get(), length)).status());
    } else {
      Consumed(r, **item);
    }
  }
}

uint64_t PackedReader::bytes_in_place() const {
  return state_ != nullptr ? state_->bytes_in_place : 0;
}

uint64_t PackedReader::bytes_copied() const {
  return state_ != nullptr ? state_->bytes_copied : 0;
}

}  // namespace tocl
