// Packed messages (Madeleine's pack/unpack, Illinois Fast Messages'
// FM_begin_message / FM_send_piece / FM_end_message): a message built
// value by value and byte range by byte range from anywhere in user
// memory, read back in the same order, and streamed as it is built.
//
//   tocl::PackedWriter out = *runtime->BeginPacked(me, peer, kMatrix);
//   out.Pack(uint32_t{rows});                                // copied
//   out.Pack(Layout::kRowMajor);                             // an enum: copied
//   out.PackBytes(std::as_bytes(std::span(matrix)));         // 4 MiB: by reference
//   if (tocl::Status s = out.End(); !s.ok()) ...
//
//   // The receiver, with a plain Recv:
//   tocl::PackedReader in = *runtime->RecvPacked(me, peer, kMatrix);
//   uint32_t rows = *in.Unpack<uint32_t>();
//   Layout layout = *in.Unpack<Layout>();
//   in.UnpackBytes(std::as_writable_bytes(std::span(my_matrix)));  // lands there
//
// Pieces: every Pack / PackBytes call is one piece, numbered from 0, and
// carries its type code and length on the wire, so the reader checks each
// against what it asks for: Unpack<uint32_t>() of a piece packed as a
// double is InvalidArgument "piece 3: expected u32 (4 bytes), found f64 (8
// bytes)"; unpacking past the last piece is OutOfRange "piece 5: past the
// end of the message (5 pieces)". A failed Unpack leaves the reader where
// it was (unpack the piece with the right type).
//
// Copied or by reference: values, and byte ranges shorter than
// PackedOptions::by_reference_from, are copied into the writer's current
// segment (a pool buffer of the short-message size): the caller may reuse
// its memory as soon as the call returns. A byte range at least that long
// goes by reference: it is sent from the caller's memory as a message of
// its own (a long message, larger than Runtime::short_max_payload(), goes
// by the zero-copy long-message rendezvous: fragments read straight from
// the caller's memory over every network that reaches the receiver). The
// memory may be reused when PackBytes returns in every case: a range up to
// short_max_payload() is copied into a message of its own and queued; a
// longer one has been read by then (between processes, the receiver holds
// all of it; in one process it was copied to the receiving thread). A long
// range to another process is like a synchronous send: PackBytes waits for
// the reader's receive of it (UnpackBytes, or a header handler's
// placement) to be posted, however much library memory there is, so two
// threads of different processes that each pack a long body to the other
// before reading deadlock.
//
// Streaming: pieces leave while the message is being packed, not at End.
// The first segment (the header) leaves at the first by-reference piece or
// when it is full; each by-reference piece leaves in PackBytes; the last
// segment leaves in End. So a receiver's header handler runs while the
// body is still being packed.
//
// On the wire: a packed message is ordinary tocl messages between the two
// threads, kept in order by the pair order like any others, over every
// network: the header segment is a message with the writer's tag (so Recv,
// Probe and RegisterHandler see it like any message); the segments and
// by-reference byte ranges after it are messages flagged as packed pieces,
// which only the packed reader receives (no Recv, Irecv or handler of the
// application matches them, whatever its tag selector).
//
// Receiving: RecvPacked (or OpenPacked over a message a Recv or a handler
// returned) gives a PackedReader that receives the rest of the message as
// it unpacks. A byte range sent by reference is received into the span
// UnpackBytes is given with no whole-message reassembly copy (its sender
// waits for that receive to be posted; over tcp each fragment is still
// copied from the pool buffer it was read into, over shm from the ring). A header handler
// (RegisterPackedHandler) sees the header segment and says where each
// following byte range goes.
//
// A header taken by Recv (or a request, or a plain handler) must be given
// to OpenPacked, and the reader read to its end or dropped: until then the
// message's later segments wait in the receiving thread's mailbox (counted
// as unreceived memory; no receive of the application sees them) and its
// next by-reference range waits with its sender blocked in PackBytes.
//
// Errors while receiving: the sender's process exiting (or its thread
// leaving) before the message is complete ends the wait with Unavailable
// "its sender h1.p3.t1 exited before piece 2 of the packed message (tag 7)
// arrived (...)" (the exit is learnt from the directory's change stream,
// or, for a wait that heard nothing for a second, by asking the directory,
// again every 5 s); a writer dropped before End has the reader fail with
// FailedPrecondition "the sender dropped the packed message before End".
//
// Lifetime and threading: writers and readers are move-only handles, used
// by one thread at a time, and must go before their Runtime. A reader
// dropped before the end of its message receives and discards the rest (it
// waits for it: a sender that is alive sends it; one that exits ends the
// wait). A writer dropped before End after some of its message left sends
// an abort segment, so that the reader fails rather than waits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tocl/export.h"
#include "tocl/gid.h"
#include "tocl/handler.h"
#include "tocl/message_info.h"
#include "tocl/status.h"

namespace tocl {

class Runtime;

namespace detail {
struct PackedWriterState;
struct PackedReaderState;
}  // namespace detail

// The type of a piece, as it travels (one byte).
enum class PackedType : uint8_t {
  kBool = 1,
  kChar = 2,
  kI8 = 3,
  kU8 = 4,
  kI16 = 5,
  kU16 = 6,
  kI32 = 7,
  kU32 = 8,
  kI64 = 9,
  kU64 = 10,
  kF32 = 11,
  kF64 = 12,
  kBytes = 13,  // a byte range (copied or by reference)
};
// "u32", "bytes", ...
TOCL_EXPORT std::string_view PackedTypeName(PackedType type);

// The piece type of T: arithmetic types by signedness and size, enums as
// their underlying type.
template <typename T>
constexpr PackedType PackedTypeOf() {
  if constexpr (std::is_enum_v<T>) {
    return PackedTypeOf<std::underlying_type_t<T>>();
  } else if constexpr (std::is_same_v<T, bool>) {
    return PackedType::kBool;
  } else if constexpr (std::is_same_v<T, char>) {
    return PackedType::kChar;
  } else if constexpr (std::is_floating_point_v<T>) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "long double is not packable");
    return sizeof(T) == 4 ? PackedType::kF32 : PackedType::kF64;
  } else {
    static_assert(std::is_integral_v<T>, "Pack takes arithmetic types and enums");
    constexpr bool s = std::is_signed_v<T>;
    if constexpr (sizeof(T) == 1) {
      return s ? PackedType::kI8 : PackedType::kU8;
    } else if constexpr (sizeof(T) == 2) {
      return s ? PackedType::kI16 : PackedType::kU16;
    } else if constexpr (sizeof(T) == 4) {
      return s ? PackedType::kI32 : PackedType::kU32;
    } else {
      static_assert(sizeof(T) == 8, "integers of 1, 2, 4 or 8 bytes");
      return s ? PackedType::kI64 : PackedType::kU64;
    }
  }
}

template <typename T>
concept Packable = std::is_arithmetic_v<T> || std::is_enum_v<T>;

struct PackedOptions {
  // Byte ranges at least this long go by reference (see above); shorter
  // ones are copied. Clamped to at least 64 bytes and to what an empty
  // segment holds (a little under short_max_payload()). Up to short_max_payload() a by-reference
  // range still costs one copy (into a message of its own, as inline it
  // costs one into the segment); above it, none. The default, half a 64 KiB
  // segment, is reasoned, not measured: a range that long copied inline
  // would often not fit the room left in the segment and take a segment
  // of its own anyway.
  size_t by_reference_from = 32 * 1024;
};

// Builds and sends one packed message (Runtime::BeginPacked).
//
// Errors: a send that fails (the receiver exited, cannot be reached) makes
// that call return the error and the writer broken: every later call
// returns FailedPrecondition with the first error. After End, every call is
// FailedPrecondition.
class TOCL_EXPORT PackedWriter {
 public:
  PackedWriter();  // empty: every call is FailedPrecondition
  ~PackedWriter();
  PackedWriter(PackedWriter&& other) noexcept;
  PackedWriter& operator=(PackedWriter&& other) noexcept;
  PackedWriter(const PackedWriter&) = delete;
  PackedWriter& operator=(const PackedWriter&) = delete;

  bool valid() const { return state_ != nullptr; }

  // Copies `value` into the current segment (sending the segment first
  // when it is full).
  template <Packable T>
  Status Pack(T value) {
    return PackValue(PackedTypeOf<T>(), &value, sizeof(T));
  }
  // A byte range: copied when shorter than by_reference_from, else sent
  // from `bytes` before this returns (see above).
  Status PackBytes(std::span<const std::byte> bytes);
  // Sends what is left; the message is complete. Ok once the last segment
  // is queued (as Send: not a delivery receipt).
  Status End();

  // Pieces packed so far; segments and by-reference ranges sent so far.
  size_t pieces() const;
  size_t messages_sent() const;

  // For the library.
  explicit PackedWriter(std::unique_ptr<detail::PackedWriterState> state);

 private:
  Status PackValue(PackedType type, const void* data, size_t size);
  std::unique_ptr<detail::PackedWriterState> state_;
};

// What PackedReader::Peek says of the next piece.
struct PackedPiece {
  size_t index = 0;
  PackedType type = PackedType::kBytes;
  uint64_t length = 0;  // bytes
  bool by_reference = false;
};

// Reads one packed message, piece by piece (Runtime::RecvPacked,
// Runtime::OpenPacked, a header handler's header).
class TOCL_EXPORT PackedReader {
 public:
  PackedReader();  // empty: every call is FailedPrecondition
  // Discards the rest of the message (see the top of this header): it
  // waits, without a deadline, for every remaining piece to arrive (until
  // then or until the sender exits).
  ~PackedReader();
  PackedReader(PackedReader&& other) noexcept;
  PackedReader& operator=(PackedReader&& other) noexcept;
  PackedReader(const PackedReader&) = delete;
  PackedReader& operator=(const PackedReader&) = delete;

  bool valid() const { return state_ != nullptr; }
  // The sender, the header's tag, and the header segment's size.
  const MessageInfo& info() const;

  // The next piece, without taking it (receiving the next segment when
  // needed). OutOfRange at the end.
  Result<PackedPiece> Peek();
  // The next piece as a T (see the top for the errors).
  template <Packable T>
  Result<T> Unpack() {
    T value{};
    TOCL_RETURN_IF_ERROR(UnpackValue(PackedTypeOf<T>(), &value, sizeof(T)));
    return value;
  }
  // The next piece, a byte range, into `out`: its length is returned.
  // InvalidArgument when it is not a byte range or longer than `out`
  // ("piece 2: a 4194304 byte range does not fit the 1024 bytes given").
  // A by-reference range lands in `out` with no whole-message reassembly
  // copy (each fragment is copied into place from the buffer it came in).
  Result<size_t> UnpackBytes(std::span<std::byte> out);
  // Whether every piece was read.
  bool at_end();
  // Receives and drops the rest of the message (the destructor does it).
  Status Discard();

  // Bytes of by-reference ranges that landed in the caller's memory
  // fragment by fragment (no reassembly buffer), and those copied there
  // whole from library memory
  // (a range that arrived before its receive was posted: only over a
  // network without a rendezvous, or within this process).
  uint64_t bytes_in_place() const;
  uint64_t bytes_copied() const;

  // For the library.
  explicit PackedReader(std::unique_ptr<detail::PackedReaderState> state);
  detail::PackedReaderState* state() const { return state_.get(); }

 private:
  Status UnpackValue(PackedType type, void* out, size_t size);
  std::unique_ptr<detail::PackedReaderState> state_;
};

// Where a header handler puts the byte ranges that follow the header: the
// n-th byte range after the pieces the header function unpacked goes to
// `destinations[n]` (its length may be smaller than the span: the
// completion says how much landed).
struct PackedPlacement {
  std::vector<std::span<std::byte>> destinations;
};

// How a packed message given to a header handler ended.
struct PackedCompletion {
  HandlerId handler = 0;
  Gid self;          // the handler's thread
  MessageInfo info;  // the sender and the header's tag and size
  // Ok, or why the body could not be placed: the header function's error
  // or exception, a piece that is not a byte range or does not fit its
  // destination, fewer destinations than byte ranges, the sender gone.
  Status status;
  // Bytes placed in each destination (as many entries as destinations).
  std::vector<uint64_t> placed;
  // As PackedReader's: by-reference bytes that landed in place, and bytes
  // copied (inline ranges, and by-reference ones that came early).
  uint64_t bytes_in_place = 0;
  uint64_t bytes_copied = 0;
};

// Reads the header (the pieces of the first segment: unpacking further is
// FailedPrecondition "piece 16 is not in the header segment") and returns
// where the body goes. An error (or an exception) fails the message: its
// body is discarded and `done` is told.
using PackedHeaderFunction = std::function<Result<PackedPlacement>(PackedReader& header)>;
// Called once per packed message the header function was called for, on
// the same thread, after the body is placed (or failed).
using PackedDoneFunction = std::function<void(const PackedCompletion&)>;

}  // namespace tocl
