#include <fmt/format.h>

#include <cstring>

#include "subsystem/via/provider.h"
#include "subsystem/via/vi_protocol.h"

namespace tocl::subsystem::via {

namespace {

// Little-endian, as the wire header (every host we build for is).
template <typename T>
void Put(std::byte* out, size_t at, T value) {
  std::memcpy(out + at, &value, sizeof(T));
}
template <typename T>
T Get(std::span<const std::byte> bytes, size_t at) {
  T value;
  std::memcpy(&value, bytes.data() + at, sizeof(T));
  return value;
}

}  // namespace

// The layout is in provider.h.
void ConnectData::Encode(std::byte out[kBytes]) const {
  std::memset(out, 0, kBytes);
  Put<uint32_t>(out, 0, kMagic);
  Put<uint16_t>(out, 4, kVersion);
  Put<uint16_t>(out, 6, static_cast<uint16_t>(class_index));
  Put<uint64_t>(out, 8, process.raw());
  Put<uint64_t>(out, 16, peer.raw());
  Put<uint32_t>(out, 24, posted);
  Put<uint32_t>(out, 28, epoch);
  Put<uint64_t>(out, 32, stream);
  Put<uint64_t>(out, 40, peer_stream);
  Put<uint32_t>(out, 48, base);
  Put<uint32_t>(out, 52, received);
}

Status ConnectData::CheckHeader(std::span<const std::byte> bytes) {
  if (bytes.size() < kHeaderBytes) {
    return InvalidArgument(fmt::format("via connect data of {} bytes (at least {} expected)",
                                       bytes.size(), kHeaderBytes));
  }
  if (Get<uint32_t>(bytes, 0) != kMagic) return InvalidArgument("via connect data: bad magic");
  if (const auto version = Get<uint16_t>(bytes, 4); version != kVersion) {
    return FailedPrecondition(
        fmt::format("via connect data: version {} (this is {})", version, kVersion));
  }
  return Status::Ok();
}

Result<ConnectData> ConnectData::Decode(std::span<const std::byte> bytes, uint32_t num_classes) {
  TOCL_RETURN_IF_ERROR(CheckHeader(bytes));
  if (bytes.size() < kBytes) {
    return InvalidArgument(
        fmt::format("via connect data of {} bytes ({} expected)", bytes.size(), kBytes));
  }
  ConnectData data;
  data.class_index = Get<uint16_t>(bytes, 6);
  data.process = Gid::FromRaw(Get<uint64_t>(bytes, 8));
  data.peer = Gid::FromRaw(Get<uint64_t>(bytes, 16));
  data.posted = Get<uint32_t>(bytes, 24);
  data.epoch = Get<uint32_t>(bytes, 28);
  data.stream = Get<uint64_t>(bytes, 32);
  data.peer_stream = Get<uint64_t>(bytes, 40);
  data.base = Get<uint32_t>(bytes, 48);
  data.received = Get<uint32_t>(bytes, 52);
  if (!data.process.is_process() || !data.peer.is_process()) {
    return InvalidArgument(fmt::format("via connect data: {} and {} are not both process ids",
                                       data.process.ToString(), data.peer.ToString()));
  }
  if (data.class_index >= num_classes) {
    return InvalidArgument(fmt::format("via connect data: size class {} (this process has {})",
                                       data.class_index, num_classes));
  }
  // No honest VI posts more (vi_protocol.h); more would let a peer's
  // acknowledgement counts wrap.
  if (data.posted == 0 || data.posted > kMaxDescriptorsPerVi) {
    return InvalidArgument(
        fmt::format("via connect data: {} receive descriptors posted", data.posted));
  }
  if (data.stream == 0) return InvalidArgument("via connect data: stream 0");
  return data;
}

}  // namespace tocl::subsystem::via
