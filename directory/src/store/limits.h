// Checks on what clients send, before anything reaches the database.
#pragma once

#include <google/protobuf/repeated_field.h>

#include "tocl/directory/v1/directory.pb.h"
#include "tocl/entity.h"
#include "tocl/gid.h"
#include "tocl/runtime.h"  // kInternalThreads

namespace tocl::directory {

inline constexpr size_t kMaxThreadsPerBatch = 10'000;
// Thread indexes from here to Gid::kMaxThread belong to each process's
// runtime (its spawn service and private mailboxes) and are never
// registered: RegisterThreads refuses them, so no process can put its own
// thread where every runtime expects its peers' spawn services.
inline constexpr uint32_t kFirstReservedThread = Gid::kMaxThread + 1 - kInternalThreads;
inline constexpr size_t kMaxSubsystemNameBytes = 32;
inline constexpr size_t kMaxEndpointAddressBytes = 1024;
inline constexpr size_t kMaxQueryResults = 10'000;
inline constexpr size_t kDefaultQueryResults = 100;
// A Query reply stops growing here (and says where to go on): well under
// the 4 MiB gRPC clients accept by default.
inline constexpr size_t kMaxQueryReplyBytes = 2 << 20;

// Count, key syntax, sizes and duplicate keys of an entity's attributes.
Status ValidateAttributes(
    const google::protobuf::RepeatedPtrField<tocl::directory::v1::Attribute>& attributes);

Status ValidateEndpoint(const tocl::directory::v1::Endpoint& endpoint);

// A process's own goodbye reason, made safe to store: cut to kMaxNameBytes
// at a character boundary; text that is not valid (control characters, bad
// UTF-8) is replaced, because it would be sent to every reader of the
// process's rows.
std::string CleanExitReason(std::string_view reason);

}  // namespace tocl::directory
