// The messages of SpawnThread: a request from a private reply mailbox of
// the caller's process to the target process's spawn service, and the reply
// back to that mailbox (internal_threads.h). Each fits one short message.
//
//   request  u32 magic "TSR1" | u64 request id | u64 spawner | u16 entry
//            length | u16 0 | u32 payload length | entry | payload
//   reply    u32 magic "TSA1" | u64 request id | u64 thread | u32 status
//            code | u16 message length | message
//
// Decoding checks every length against the bytes there are: requests come
// from any process that can reach ours.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tocl/gid.h"
#include "tocl/status.h"

namespace tocl::runtime {

inline constexpr size_t kSpawnRequestHeaderBytes = 28;
// Longest error message a reply carries.
inline constexpr size_t kMaxReplyMessageBytes = 2048;

struct SpawnRequest {
  uint64_t id = 0;
  Gid spawner;
  std::string_view entry;              // into the decoded bytes
  std::span<const std::byte> payload;  // into the decoded bytes
};

struct SpawnReply {
  uint64_t id = 0;
  Gid thread;     // when status is ok
  Status status;  // the service's error
};

std::vector<std::byte> EncodeSpawnRequest(const SpawnRequest& request);
// InvalidArgument naming what is wrong; `id` is set when the bytes got that
// far (so the service can still answer).
Result<SpawnRequest> DecodeSpawnRequest(std::span<const std::byte> bytes, uint64_t& id);

std::vector<std::byte> EncodeSpawnReply(const SpawnReply& reply);
Result<SpawnReply> DecodeSpawnReply(std::span<const std::byte> bytes);

}  // namespace tocl::runtime
