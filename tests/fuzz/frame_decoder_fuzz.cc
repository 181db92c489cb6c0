// libFuzzer target for the wire header decoder: whatever bytes come off a
// socket, DecodeHeader either rejects them with InvalidArgument or returns a
// header every later step of the tcp reader can trust. Any violated
// invariant aborts (libFuzzer reports it with the input).
//
// Build and run: tests/fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>

#include "buffers/size_class.h"
#include "tocl/gid.h"
#include "tocl/status.h"
#include "wire/frame.h"

namespace {

using tocl::Gid;
namespace buffers = tocl::buffers;
namespace wire = tocl::wire;

[[noreturn]] void Broken(const char* what) {
  std::fprintf(stderr, "frame_decoder_fuzz: invariant broken: %s\n", what);
  std::abort();
}

#define TOCL_FUZZ_CHECK(cond)   \
  do {                          \
    if (!(cond)) Broken(#cond); \
  } while (0)

// The receivers the runtime builds: the default nine classes (64 KiB), the
// largest (1 MiB) and the smallest (256 B), as the tcp subsystem sets its
// limits: the largest class minus the header.
constexpr uint32_t kClassCounts[] = {9, buffers::kMaxClasses, 1};

void CheckOne(std::span<const std::byte> bytes, uint32_t num_classes) {
  const wire::Limits limits{.max_payload = static_cast<uint32_t>(
                                buffers::ClassBytes(num_classes - 1) - wire::kHeaderBytes)};
  tocl::Result<wire::Header> decoded = wire::DecodeHeader(bytes, limits);
  if (!decoded.ok()) {
    TOCL_FUZZ_CHECK(decoded.status().code() == tocl::StatusCode::kInvalidArgument);
    TOCL_FUZZ_CHECK(!decoded.status().message().empty());
    if (bytes.size() >= wire::kHeaderBytes) {
      // The in-place check (the shm path) agrees with the decoder.
      wire::Header in_place;
      std::memcpy(&in_place, bytes.data(), sizeof(in_place));
      TOCL_FUZZ_CHECK(wire::ValidateHeader(in_place, limits) == decoded.status());
    }
    return;
  }
  const wire::Header& header = *decoded;
  TOCL_FUZZ_CHECK(bytes.size() >= wire::kHeaderBytes);
  TOCL_FUZZ_CHECK(std::memcmp(&header, bytes.data(), wire::kHeaderBytes) == 0);
  TOCL_FUZZ_CHECK(wire::ValidateHeader(header, limits).ok());
  TOCL_FUZZ_CHECK(header.magic == wire::kMagic && header.version == wire::kVersion);
  TOCL_FUZZ_CHECK(header.flags == 0 && header.reserved == 0);

  switch (header.kind) {
    case wire::FrameKind::kMessage: {
      // What the tcp reader does next: pick a buffer class for the frame
      // and copy header + payload into it.
      TOCL_FUZZ_CHECK(header.length <= limits.max_payload);
      const uint32_t class_index = buffers::ClassFor(header.length);
      TOCL_FUZZ_CHECK(class_index < num_classes);
      const size_t frame_bytes = wire::kHeaderBytes + header.length;
      TOCL_FUZZ_CHECK(frame_bytes <= buffers::ClassBytes(class_index));
      TOCL_FUZZ_CHECK(class_index == 0 || frame_bytes > buffers::ClassBytes(class_index - 1));
      TOCL_FUZZ_CHECK(header.offset == 0 && header.total == header.length);
      TOCL_FUZZ_CHECK(Gid::FromRaw(header.source).is_thread());
      TOCL_FUZZ_CHECK(Gid::FromRaw(header.destination).is_thread());
      // The runtime reads the host and process off a thread id.
      TOCL_FUZZ_CHECK(Gid::FromRaw(header.source).process().is_process());
      TOCL_FUZZ_CHECK(Gid::FromRaw(header.destination).process().is_process());
      break;
    }
    case wire::FrameKind::kHello:
      TOCL_FUZZ_CHECK(header.length == 0 && header.offset == 0 && header.total == 0);
      TOCL_FUZZ_CHECK(header.tag == 0);
      TOCL_FUZZ_CHECK(Gid::FromRaw(header.source).is_process());
      break;
    default:
      Broken("an unknown frame kind was accepted");
  }

  // Encoding what was decoded gives the same bytes, and decodes again.
  std::byte again[wire::kHeaderBytes];
  wire::EncodeHeader(header, again);
  TOCL_FUZZ_CHECK(std::memcmp(again, bytes.data(), wire::kHeaderBytes) == 0);
  TOCL_FUZZ_CHECK(wire::DecodeHeader(again, limits).ok());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  for (uint32_t num_classes : kClassCounts) CheckOne(bytes, num_classes);
  // A zero limit: only empty messages.
  auto empty_only = wire::DecodeHeader(bytes, wire::Limits{});
  if (empty_only.ok() && empty_only->kind == wire::FrameKind::kMessage) {
    TOCL_FUZZ_CHECK(empty_only->length == 0);
  }
  return 0;
}
