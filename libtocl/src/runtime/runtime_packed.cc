// Runtime's packed messages (tocl/packed_message.h): the public checks, the
// writer's and reader's state, and the header handler, which is a message
// handler (tocl/handler.h) whose calls read the header with a reader and
// place the body with it.
#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <utility>

#include "runtime/internal_threads.h"
#include "runtime/packed_state.h"
#include "runtime/runtime_impl.h"
#include "tocl/runtime.h"

namespace tocl {

std::string_view PackedTypeName(PackedType type) {
  switch (type) {
    case PackedType::kBool:
      return "bool";
    case PackedType::kChar:
      return "char";
    case PackedType::kI8:
      return "i8";
    case PackedType::kU8:
      return "u8";
    case PackedType::kI16:
      return "i16";
    case PackedType::kU16:
      return "u16";
    case PackedType::kI32:
      return "i32";
    case PackedType::kU32:
      return "u32";
    case PackedType::kI64:
      return "i64";
    case PackedType::kU64:
      return "u64";
    case PackedType::kF32:
      return "f32";
    case PackedType::kF64:
      return "f64";
    case PackedType::kBytes:
      return "bytes";
  }
  return "unknown";
}

Result<PackedWriter> Runtime::BeginPacked(Gid from, Gid to, Tag tag, PackedOptions options) {
  Impl& impl = *impl_;
  TOCL_RETURN_IF_ERROR(runtime::CheckUserEnds(from, to));
  TOCL_RETURN_IF_ERROR(impl.send_side.CheckSend(from, to, tag));
  auto state = std::make_unique<detail::PackedWriterState>();
  state->runtime = this;
  state->impl = &impl;
  state->from = from;
  state->to = to;
  state->tag = tag;
  // Any id but kAnyTag (not a tag a message can carry).
  do {
    state->stream = impl.next_packed_stream.fetch_add(1, std::memory_order_relaxed);
  } while (state->stream == kAnyTag);
  state->segment_bytes = impl.ShortMaxPayload();
  // Abort segments are cut to below it (packed_codec.h); an empty segment
  // holds it (the smallest short_max leaves 170 bytes).
  state->by_reference_from =
      std::clamp(options.by_reference_from, runtime::packed::kMinByReference,
                 runtime::packed::SegmentBuilder::InlineRoom(state->segment_bytes));
  return PackedWriter(std::move(state));
}

Result<PackedReader> Runtime::OpenPacked(Gid self, Buffer header) {
  Impl& impl = *impl_;
  if (!header.valid()) return InvalidArgument("OpenPacked of an empty buffer");
  TOCL_RETURN_IF_ERROR(impl.receive.LocalMailbox(self).status());
  TOCL_ASSIGN_OR_RETURN(runtime::packed::Segment segment,
                        runtime::packed::ParseSegment(header.span()));
  if (segment.magic != runtime::packed::kHeadMagic) {
    return DataLoss(
        fmt::format("a message from {} (tag {}) is a later segment of a packed "
                    "message, not its header",
                    header.source().ToString(), header.tag()));
  }
  auto state = std::make_unique<detail::PackedReaderState>();
  state->impl = &impl;
  state->self = self;
  state->source = header.source();
  state->info = MessageInfo{header.source(), header.tag(), header.size()};
  state->stream = segment.number;
  state->segment = std::move(segment);
  state->message = std::move(header);
  return PackedReader(std::move(state));
}

Result<PackedReader> Runtime::RecvPacked(Gid self, Gid source, TagMatch tag) {
  TOCL_ASSIGN_OR_RETURN(Buffer header, Recv(self, source, tag));
  return OpenPacked(self, std::move(header));
}

namespace {

// Places the byte ranges after the header into `placement`'s destinations.
Status Place(PackedReader& reader, const PackedPlacement& placement,
             std::vector<uint64_t>& placed) {
  placed.assign(placement.destinations.size(), 0);
  for (size_t n = 0;; ++n) {
    Result<PackedPiece> piece = reader.Peek();
    if (!piece.ok()) return reader.at_end() ? Status::Ok() : piece.status();
    if (piece->type != PackedType::kBytes) {
      return InvalidArgument(
          fmt::format("piece {}: a {} after the header; a header handler places byte ranges only",
                      piece->index, PackedTypeName(piece->type)));
    }
    if (n >= placement.destinations.size()) {
      return InvalidArgument(
          fmt::format("piece {}: a {} byte range and no destination left for it (the placement "
                      "has {})",
                      piece->index, piece->length, placement.destinations.size()));
    }
    TOCL_ASSIGN_OR_RETURN(size_t length, reader.UnpackBytes(placement.destinations[n]));
    placed[n] = length;
  }
}

// The header function's placement; its exception as an error.
Result<PackedPlacement> CallHeader(const PackedHeaderFunction& header, PackedReader& reader) {
  try {
    return header(reader);
  } catch (const std::exception& e) {
    return Internal(fmt::format("the header function threw: {}", e.what()));
  } catch (...) {
    return Internal("the header function threw (not a std::exception)");
  }
}

}  // namespace

Result<HandlerRegistration> Runtime::RegisterPackedHandler(Gid thread, Gid source, TagMatch tag,
                                                           PackedHeaderFunction header,
                                                           PackedDoneFunction done,
                                                           HandlerOptions options) {
  if (!header || !done) {
    return InvalidArgument("RegisterPackedHandler needs a header function and a done function");
  }
  auto call = [this, header = std::move(header), done = std::move(done)](HandlerContext& context) {
    PackedCompletion completion;
    completion.handler = context.handler;
    completion.self = context.self;
    completion.info = context.info;
    Result<PackedReader> reader = OpenPacked(context.self, std::move(context.message));
    if (!reader.ok()) {
      completion.status = reader.status();
      done(completion);
      return;
    }
    detail::PackedReaderState& state = *reader->state();
    state.header_only = true;
    Result<PackedPlacement> placement = CallHeader(header, *reader);
    state.header_only = false;
    completion.status =
        placement.ok() ? Place(*reader, *placement, completion.placed) : placement.status();
    if (!completion.status.ok()) {
      // The rest is received and dropped (its sender waits for that); a
      // failure there is the one already reported, or the sender gone.
      (void)reader->Discard();
    }
    completion.bytes_in_place = reader->bytes_in_place();
    completion.bytes_copied = reader->bytes_copied();
    done(completion);
  };
  return RegisterHandler(thread, source, tag, std::move(call), std::move(options));
}

}  // namespace tocl
