// The directory's SQLite schema and its migrations.
//
// Gids are stored as INTEGER: the raw 64-bit id reinterpreted as a signed
// int64 (StoredGid). Each host's and each process's id range stays
// contiguous in that order, so "host=h4" is a primary-key range scan.
#pragma once

#include <bit>
#include <cstdint>

#include "store/sqlite.h"
#include "tocl/gid.h"

namespace tocl::directory {

inline constexpr int64_t StoredGid(Gid gid) {
  return std::bit_cast<int64_t>(gid.raw());
}
inline constexpr Gid GidFromStored(int64_t stored) {
  return Gid::FromRaw(std::bit_cast<uint64_t>(stored));
}

// Row states, stored as integers.
inline constexpr int64_t kStateRunning = 1;
inline constexpr int64_t kStateExited = 2;

// Entity kinds in attribute rows, so that an attribute-driven query walks
// only the index slice of the kind it wants (a role shared by a million
// threads is not walked to find processes).
inline constexpr int64_t kKindHost = 1;
inline constexpr int64_t kKindProcess = 2;
inline constexpr int64_t kKindThread = 3;
inline constexpr int64_t KindOf(Gid gid) {
  return gid.is_host() ? kKindHost : gid.is_process() ? kKindProcess : kKindThread;
}

// Change-log operations, stored as integers (equal to the proto's ChangeOp).
inline constexpr int64_t kOpAdded = 1;
inline constexpr int64_t kOpUpdated = 2;
inline constexpr int64_t kOpExited = 3;
inline constexpr int64_t kOpUnreachable = 4;
inline constexpr int64_t kOpReachable = 5;
inline constexpr int64_t kOpRemoved = 6;

// changes.origin: 0 for this host's own changes (what replicas pull), else
// the host index whose replicated change this is (local watchers see both).
inline constexpr int64_t kOriginOwn = 0;

// The schema version this build writes.
int LatestSchemaVersion();

// Brings the database to LatestSchemaVersion(), one migration per
// transaction. FailedPrecondition if the database is newer than this build.
Status Migrate(Database& db);

// Connection settings every connection of the store uses: WAL, FULL sync
// (every acknowledged commit is on disk), a busy timeout, the page cache.
Status ConfigureConnection(Database& db, int64_t cache_kib);

}  // namespace tocl::directory
