// What a PackedWriter and a PackedReader (tocl/packed_message.h) hold:
// the runtime they send and receive through, their stream, and where they
// are in it. Made by runtime_packed.cc, driven by packed_writer.cc and
// packed_reader.cc; the layout of segments is packed_codec.h's.
//
// Threading: a writer's or reader's owner thread only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/packed_codec.h"
#include "tocl/buffer.h"
#include "tocl/packed_message.h"
#include "tocl/runtime.h"
#include "tocl/status.h"

namespace tocl::detail {

struct PackedWriterState {
  Runtime* runtime = nullptr;
  Runtime::Impl* impl = nullptr;
  Gid from;
  Gid to;
  Tag tag = 0;
  uint32_t stream = 0;           // the pieces' tag
  size_t segment_bytes = 0;      // a segment's size (at most the short maximum)
  size_t by_reference_from = 0;  // clamped (PackedOptions)

  Buffer segment;  // the segment being filled; empty until the next piece needs one
  runtime::packed::SegmentBuilder builder;
  uint32_t segments_sent = 0;  // the next segment's number; 0: the header is not out yet
  size_t pieces = 0;
  size_t messages = 0;
  Status broken;  // the first failure; every later call returns it
  bool ended = false;
};

struct PackedReaderState {
  Runtime::Impl* impl = nullptr;
  Gid self;
  Gid source;  // the sending thread
  MessageInfo info;
  uint32_t stream = 0;

  Buffer message;  // the current segment's message (its bytes back `segment`)
  runtime::packed::Segment segment;
  size_t at = 0;  // the current item of `segment`
  uint32_t next_number = 1;
  bool need_segment = false;  // the current item is used up: the next segment comes next
  size_t piece = 0;           // pieces read so far (the next one's index)
  bool ended = false;         // the end was reached
  // A header handler's header: only the first segment may be read.
  bool header_only = false;
  Status failed;  // a receive that failed: the rest of the message is lost
  uint64_t bytes_in_place = 0;
  uint64_t bytes_copied = 0;
};

}  // namespace tocl::detail
