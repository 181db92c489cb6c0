#include <fmt/format.h>

#include <cstring>

#include "subsystem/via/provider.h"

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

//   0 magic u32 | 4 version u16 | 6 reserved u16 | 8 process u64 | 16 peer u64
//  24 class u32 | 28 posted u32
void ConnectData::Encode(std::byte out[kBytes]) const {
  std::memset(out, 0, kBytes);
  Put<uint32_t>(out, 0, kMagic);
  Put<uint16_t>(out, 4, kVersion);
  Put<uint64_t>(out, 8, process.raw());
  Put<uint64_t>(out, 16, peer.raw());
  Put<uint32_t>(out, 24, class_index);
  Put<uint32_t>(out, 28, posted);
}

Result<ConnectData> ConnectData::Decode(std::span<const std::byte> bytes, uint32_t num_classes) {
  if (bytes.size() < kBytes) {
    return InvalidArgument(
        fmt::format("via connect data of {} bytes ({} expected)", bytes.size(), kBytes));
  }
  if (Get<uint32_t>(bytes, 0) != kMagic) return InvalidArgument("via connect data: bad magic");
  if (const auto version = Get<uint16_t>(bytes, 4); version != kVersion) {
    return InvalidArgument(
        fmt::format("via connect data: version {} (this is {})", version, kVersion));
  }
  ConnectData data;
  data.process = Gid::FromRaw(Get<uint64_t>(bytes, 8));
  data.peer = Gid::FromRaw(Get<uint64_t>(bytes, 16));
  data.class_index = Get<uint32_t>(bytes, 24);
  data.posted = Get<uint32_t>(bytes, 28);
  if (!data.process.is_process() || !data.peer.is_process()) {
    return InvalidArgument(fmt::format("via connect data: {} and {} are not both process ids",
                                       data.process.ToString(), data.peer.ToString()));
  }
  if (data.class_index >= num_classes) {
    return InvalidArgument(fmt::format("via connect data: size class {} (this process has {})",
                                       data.class_index, num_classes));
  }
  if (data.posted == 0 || data.posted > 0xFFFF) {
    return InvalidArgument(
        fmt::format("via connect data: {} receive descriptors posted", data.posted));
  }
  return data;
}

}  // namespace tocl::subsystem::via
