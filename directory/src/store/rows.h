// Row-level helpers shared by the store's parts (store.cc, store_replica.cc,
// store_spawn.cc): they run inside a transaction their caller holds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "store/schema.h"
#include "store/sqlite.h"
#include "tocl/directory/v1/directory.pb.h"
#include "tocl/gid.h"

namespace tocl::directory {

namespace pb = ::tocl::directory::v1;

int64_t NowMicros();

// A random session token (16 bytes from the kernel's getrandom()).
std::string NewSessionToken();

// Takes the next process index of `host` (indexes only grow, in the same
// transaction as the row they number): the new process's Gid.
Result<Gid> AllocateProcessGid(Database& db, Gid host);

// Stored bounds of every id under `parent` (the parent itself included).
std::pair<int64_t, int64_t> StoredRange(Gid parent);

// Appends to the change log; `origin` is kOriginOwn or a replicated host's index.
Status InsertChange(Database& db, Gid gid, int64_t op, int64_t at_us, int64_t origin = kOriginOwn);
uint64_t LastChangeSeq(Database& db);

Status InsertAttributes(Database& db, Gid gid,
                        const google::protobuf::RepeatedPtrField<pb::Attribute>& attributes);

// How a process ended, when its daemon reaped it.
struct ExitStatus {
  std::optional<int> code;    // exit(2) status
  std::optional<int> signal;  // the signal that ended it
};

// Marks a running process and its running threads exited (with change-log
// entries); nothing when it is not running.
Status MarkExitedLocked(Database& db, Gid process, std::string_view reason, ExitStatus status = {});

// Deletes the row of `gid` with its attributes (and endpoints, for a
// process); `with_threads`: a process's threads and their attributes too.
// Ok when there is nothing to delete.
Status DeleteEntityRows(Database& db, Gid gid, bool with_threads);

// Whether `host` is reachable as this daemon sees it (true for unknown hosts:
// they are not down, they are absent).
Result<bool> HostReachable(Database& db, Gid host);

// What the directory says of an entity it no longer holds: exited, with
// `removed` set and `reason`; nothing else is known.
pb::Entity Tombstone(Gid gid, std::string reason);
inline constexpr const char* kRemovedReason = "exited and was removed from the directory";

// The entity with its attributes (and endpoints, for processes). State is
// UNREACHABLE for a running entity whose host is down.
Result<pb::Entity> LoadEntity(Database& db, Gid gid);

// Up to `max` changes with seq > since, oldest first, each with its entity
// as it is now (a Tombstone when it was removed), read in one transaction of `db`. `own_only`: this
// host's own changes (what replicas pull), not the replicated ones. `op_mask`: bit (1 << op) set
// for each operation wanted; 0 = every one.
Result<std::vector<pb::ChangeEvent>> ReadChanges(Database& db, uint64_t since, size_t max,
                                                 bool own_only, uint32_t op_mask = 0);

}  // namespace tocl::directory
