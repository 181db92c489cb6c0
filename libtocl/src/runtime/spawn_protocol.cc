#include "runtime/spawn_protocol.h"

#include <fmt/format.h>

#include "runtime/byte_codec.h"
#include "tocl/entry.h"

namespace tocl::runtime {
namespace {

constexpr uint32_t kRequestMagic = 0x31525354;  // "TSR1"
constexpr uint32_t kReplyMagic = 0x31415354;    // "TSA1"

}  // namespace

std::vector<std::byte> EncodeSpawnRequest(const SpawnRequest& request) {
  ByteWriter out;
  out.Put(kRequestMagic);
  out.Put(request.id);
  out.Put(request.spawner.raw());
  out.Put(static_cast<uint16_t>(request.entry.size()));
  out.Put(uint16_t{0});
  out.Put(static_cast<uint32_t>(request.payload.size()));
  out.PutText(request.entry);
  out.PutBytes(request.payload);
  return std::move(out.bytes());
}

Result<SpawnRequest> DecodeSpawnRequest(std::span<const std::byte> bytes, uint64_t& id) {
  ByteReader in(bytes);
  const auto magic = in.Get<uint32_t>();
  if (!in.ok() || magic != kRequestMagic) {
    return InvalidArgument("not a spawn-thread request (no marker)");
  }
  SpawnRequest request;
  request.id = in.Get<uint64_t>();
  if (!in.ok()) return InvalidArgument("a spawn-thread request is cut short");
  id = request.id;
  request.spawner = Gid::FromRaw(in.Get<uint64_t>());
  const auto entry_bytes = in.Get<uint16_t>();
  const auto zero = in.Get<uint16_t>();
  const auto payload_bytes = in.Get<uint32_t>();
  if (!in.ok()) return InvalidArgument("a spawn-thread request is cut short");
  if (zero != 0) return InvalidArgument("a spawn-thread request has a non-zero reserved field");
  if (entry_bytes == 0 || entry_bytes > kMaxEntryNameBytes) {
    return InvalidArgument(fmt::format("a spawn-thread request names an entry of {} bytes (1..{})",
                                       entry_bytes, kMaxEntryNameBytes));
  }
  if (in.remaining() != size_t{entry_bytes} + payload_bytes) {
    return InvalidArgument(
        fmt::format("a spawn-thread request says {} + {} bytes of entry and payload, but {} follow",
                    entry_bytes, payload_bytes, in.remaining()));
  }
  request.entry = in.GetText(entry_bytes);
  request.payload = in.GetBytes(payload_bytes);
  TOCL_RETURN_IF_ERROR(ValidateEntryName(request.entry));
  return request;
}

std::vector<std::byte> EncodeSpawnReply(const SpawnReply& reply) {
  ByteWriter out;
  out.Put(kReplyMagic);
  out.Put(reply.id);
  out.Put(reply.thread.raw());
  out.Put(static_cast<uint32_t>(reply.status.code()));
  const std::string_view message =
      std::string_view(reply.status.message()).substr(0, kMaxReplyMessageBytes);
  out.Put(static_cast<uint16_t>(message.size()));
  out.PutText(message);
  return std::move(out.bytes());
}

Result<SpawnReply> DecodeSpawnReply(std::span<const std::byte> bytes) {
  ByteReader in(bytes);
  const auto magic = in.Get<uint32_t>();
  SpawnReply reply;
  reply.id = in.Get<uint64_t>();
  reply.thread = Gid::FromRaw(in.Get<uint64_t>());
  const auto code = in.Get<uint32_t>();
  const auto message_bytes = in.Get<uint16_t>();
  const std::string_view message = in.GetText(message_bytes);
  if (!in.ok() || magic != kReplyMagic || in.remaining() != 0 ||
      message_bytes > kMaxReplyMessageBytes) {
    return InvalidArgument(fmt::format("a malformed spawn-thread reply ({} bytes)", bytes.size()));
  }
  if (code == 0) {
    if (!reply.thread.is_thread()) {
      return InvalidArgument("a spawn-thread reply says ok but names no thread");
    }
    return reply;
  }
  reply.status = StatusFromWire(code, message, "the spawn service failed without a reason");
  return reply;
}

}  // namespace tocl::runtime
