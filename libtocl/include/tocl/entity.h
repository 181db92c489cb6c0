// What the directory knows about a host, process or thread.
// Plain value types: copy them freely.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tocl/export.h"
#include "tocl/gid.h"

namespace tocl {

enum class EntityKind { kHost, kProcess, kThread };
// kUnreachable: running as far as the last news says, but its host is down
// (no heartbeat reached the local daemon for the configured time).
enum class EntityState { kRunning, kExited, kUnreachable };

TOCL_EXPORT std::string_view EntityKindName(EntityKind kind);  // "host", "process", "thread"
TOCL_EXPORT std::string_view EntityStateName(
    EntityState state);  // "running", "exited", "unreachable"

// Attribute keys are [A-Za-z_][A-Za-z0-9_.-]* (so they can appear in
// queries), at most kMaxAttributeKeyBytes; values are any UTF-8 text up to
// kMaxAttributeValueBytes; at most kMaxAttributesPerEntity per entity. The
// keys kind, name, state, host, process, pid and gid are reserved: they name
// built-in fields in queries.
using Attributes = std::map<std::string, std::string, std::less<>>;

inline constexpr size_t kMaxNameBytes = 256;
inline constexpr size_t kMaxAttributeKeyBytes = 256;
inline constexpr size_t kMaxAttributeValueBytes = 4096;
inline constexpr size_t kMaxAttributesPerEntity = 64;

struct Endpoint {
  std::string subsystem;  // "shm", "tcp", ...
  std::string address;    // bytes, opaque to the directory
};

struct Entity {
  Gid gid;
  EntityKind kind = EntityKind::kThread;
  std::string name;
  EntityState state = EntityState::kRunning;
  int64_t os_pid = 0;  // processes only
  Attributes attributes;
  std::vector<Endpoint> endpoints;  // processes only
  std::chrono::system_clock::time_point started_at;
  std::chrono::system_clock::time_point exited_at;  // epoch while running
  std::string exit_reason;
  // Processes a daemon spawned and reaped: the exit(2) status or the signal
  // that ended it. Unset while running, or when nobody reaped it (a process
  // that enrolled by itself and died: the daemon only saw its stream break).
  std::optional<int> exit_status;
  std::optional<int> exit_signal;
  Gid parent;           // processes: the thread that spawned it; null for none
  std::string address;  // hosts: the daemon's cluster (gRPC TCP) address
  // It exited and was removed from the directory (the daemon's
  // retain_exited_seconds after its exit): a tombstone, of which only gid,
  // kind, state (kExited) and exit_reason are known. Lookup answers one for
  // a removed process and the threads of one.
  bool removed = false;
};

// One thread to register with the directory.
struct ThreadInfo {
  Gid gid;
  std::string name;
  Attributes attributes;
};

// kUnreachable / kReachable: a host (the event's gid) stopped answering
// heartbeats / answers again; its processes and threads read as
// kUnreachable meanwhile (one event per host, none per entity).
// kRemoved: an exited entity was removed from the directory (its owner's
// retention time passed); a process's event covers its threads, which get
// none of their own. The event's entity is a tombstone (Entity::removed).
enum class ChangeOp { kAdded, kUpdated, kExited, kUnreachable, kReachable, kRemoved };
// "added", "updated", "exited", "unreachable", "reachable", "removed"
TOCL_EXPORT std::string_view ChangeOpName(ChangeOp op);

struct ChangeEvent {
  uint64_t seq = 0;
  ChangeOp op = ChangeOp::kAdded;
  Gid gid;
  std::chrono::system_clock::time_point at;
  Entity entity;  // as it is when the event was sent
};

}  // namespace tocl

namespace tocl {

// The checks the daemon applies (clients may apply them early to fail fast).
// InvalidArgument naming the offending part (sizes and counts included:
// they are limits on one request, not a resource running out).
TOCL_EXPORT Status ValidateName(std::string_view what, std::string_view name);
TOCL_EXPORT Status ValidateAttribute(std::string_view key, std::string_view value);
// Each attribute, and at most kMaxAttributesPerEntity of them.
TOCL_EXPORT Status ValidateAttributes(const Attributes& attributes);
TOCL_EXPORT bool IsReservedAttributeKey(std::string_view key);

}  // namespace tocl
