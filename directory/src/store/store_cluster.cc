// The cluster part of the Store: membership rows, the own-change feed that
// replicas pull, applying other hosts' changes and snapshots, reachability
// and change-log trimming.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <span>
#include <vector>

#include "store/limits.h"
#include "store/reader_pool.h"
#include "store/rows.h"
#include "store/schema.h"
#include "store/store.h"

namespace tocl::directory {
namespace {

// Rows deleted by one TrimChangeLog call: a million-row trim must not hold
// the writer (and every registration behind it) for seconds.
constexpr int64_t kTrimBatch = 100'000;

int64_t OriginOf(Gid host) {
  return static_cast<int64_t>(host.host_index());
}

// The host row a member gets before its own rows arrive, so that `kind=host`
// lists it; an address that changed is updated. Changes are logged with the
// member's index as origin: they are this daemon's view, never replicated.
Status EnsureMemberHostRow(Database& db, Gid host, std::string_view name,
                           std::string_view address) {
  TOCL_ASSIGN_OR_RETURN(ScopedStatement read,
                        db.Cached("SELECT address FROM hosts WHERE gid = ?1"));
  TOCL_ASSIGN_OR_RETURN(bool row, read->Bind(1, StoredGid(host)).Step());
  const int64_t now = NowMicros();
  if (!row) {
    read->Reset();
    TOCL_ASSIGN_OR_RETURN(ScopedStatement insert,
                          db.Cached("INSERT INTO hosts(gid, name, address, state, started_at_us) "
                                    "VALUES (?1, ?2, ?3, 1, ?4)"));
    TOCL_RETURN_IF_ERROR(
        insert->Bind(1, StoredGid(host)).Bind(2, name).Bind(3, address).Bind(4, now).Run());
    return InsertChange(db, host, kOpAdded, now, OriginOf(host));
  }
  const bool same = address.empty() || read->ColumnText(0) == address;
  read->Reset();
  if (same) return Status::Ok();
  TOCL_ASSIGN_OR_RETURN(ScopedStatement update,
                        db.Cached("UPDATE hosts SET address = ?2 WHERE gid = ?1"));
  TOCL_RETURN_IF_ERROR(update->Bind(1, StoredGid(host)).Bind(2, address).Run());
  return InsertChange(db, host, kOpUpdated, now, OriginOf(host));
}

Status UpsertMember(Database& db, const MemberRow& member) {
  TOCL_ASSIGN_OR_RETURN(
      ScopedStatement upsert,
      db.Cached("INSERT INTO members(host, name, address, joined_at_us) VALUES (?1, ?2, ?3, ?4) "
                "ON CONFLICT(host) DO UPDATE SET name = excluded.name, "
                "address = CASE excluded.address WHEN '' THEN members.address "
                "ELSE excluded.address END"));
  TOCL_RETURN_IF_ERROR(upsert->Bind(1, StoredGid(member.host))
                           .Bind(2, member.name)
                           .Bind(3, member.address)
                           .Bind(4, NowMicros())
                           .Run());
  return EnsureMemberHostRow(db, member.host, member.name, member.address);
}

Result<std::set<uint32_t>> UsedHostIds(Database& db) {
  std::set<uint32_t> used;
  TOCL_ASSIGN_OR_RETURN(ScopedStatement stmt,
                        db.Cached("SELECT host FROM members UNION SELECT gid FROM hosts"));
  for (;;) {
    TOCL_ASSIGN_OR_RETURN(bool row, stmt->Step());
    if (!row) break;
    used.insert(GidFromStored(stmt->ColumnInt(0)).host_index());
  }
  return used;
}

Status CheckOrigin(Gid self, Gid origin) {
  if (!origin.is_host()) {
    return InvalidArgument(fmt::format("{} is not a host id", origin.ToString()));
  }
  if (origin == self) {
    return InvalidArgument(
        fmt::format("{} is this host: its rows are not replicated here", origin.ToString()));
  }
  return Status::Ok();
}

// Every event must name an entity of `origin`, with the entity it carries.
Status CheckEvents(Gid origin, std::span<const pb::ChangeEvent> events) {
  for (const pb::ChangeEvent& event : events) {
    const Gid gid = Gid::FromRaw(event.gid());
    if (!gid.valid() || gid.host() != origin) {
      return InvalidArgument(fmt::format("a change of {} in the replication stream of {}",
                                         gid.ToString(), origin.ToString()));
    }
    const bool reachability =
        event.op() == pb::CHANGE_OP_UNREACHABLE || event.op() == pb::CHANGE_OP_REACHABLE;
    if (reachability) {
      // Local observations of each daemon: never part of a replication
      // stream (a snapshot would upsert the entity they carry).
      return InvalidArgument(fmt::format("a {} change of {} in the replication stream of {}",
                                         pb::ChangeOp_Name(event.op()), gid.ToString(),
                                         origin.ToString()));
    }
    if (event.entity().gid() != event.gid()) {
      return InvalidArgument(fmt::format("the change of {} carries entity {}", gid.ToString(),
                                         Gid::FromRaw(event.entity().gid()).ToString()));
    }
  }
  return Status::Ok();
}

int64_t RowState(const pb::Entity& entity) {
  // UNREACHABLE is a reader's view of a running entity, never a row state.
  return entity.state() == pb::EXITED ? kStateExited : kStateRunning;
}

void BindOptional(Statement& stmt, int index, bool has, int64_t value) {
  if (has) {
    stmt.Bind(index, value);
  } else {
    stmt.BindNull(index);
  }
}

// Replaces the rows of one replicated entity with what `entity` says. The
// session token of a replicated process is always NULL: nobody writes on
// behalf of another host's processes.
Status UpsertReplicatedEntity(Database& db, const pb::Entity& entity) {
  const Gid gid = Gid::FromRaw(entity.gid());
  const int64_t stored = StoredGid(gid);
  if (gid.is_host()) {
    TOCL_ASSIGN_OR_RETURN(
        ScopedStatement upsert,
        db.Cached("INSERT INTO hosts(gid, name, address, state, started_at_us, exited_at_us, "
                  "exit_reason) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) "
                  "ON CONFLICT(gid) DO UPDATE SET name = excluded.name, "
                  "address = CASE excluded.address WHEN '' THEN hosts.address "
                  "ELSE excluded.address END, state = excluded.state, "
                  "started_at_us = excluded.started_at_us, exited_at_us = excluded.exited_at_us, "
                  "exit_reason = excluded.exit_reason"));
    TOCL_RETURN_IF_ERROR(upsert->Bind(1, stored)
                             .Bind(2, entity.name())
                             .Bind(3, entity.address())
                             .Bind(4, RowState(entity))
                             .Bind(5, entity.started_at_us())
                             .Bind(6, entity.exited_at_us())
                             .Bind(7, entity.exit_reason())
                             .Run());
  } else if (gid.is_process()) {
    TOCL_ASSIGN_OR_RETURN(
        ScopedStatement upsert,
        db.Cached("INSERT INTO processes(gid, name, os_pid, state, started_at_us, exited_at_us, "
                  "exit_reason, session_token, exit_status, exit_signal, parent) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, ?8, ?9, ?10) "
                  "ON CONFLICT(gid) DO UPDATE SET name = excluded.name, os_pid = excluded.os_pid, "
                  "state = excluded.state, started_at_us = excluded.started_at_us, "
                  "exited_at_us = excluded.exited_at_us, exit_reason = excluded.exit_reason, "
                  "session_token = NULL, exit_status = excluded.exit_status, "
                  "exit_signal = excluded.exit_signal, parent = excluded.parent"));
    upsert->Bind(1, stored)
        .Bind(2, entity.name())
        .Bind(3, entity.os_pid())
        .Bind(4, RowState(entity))
        .Bind(5, entity.started_at_us())
        .Bind(6, entity.exited_at_us())
        .Bind(7, entity.exit_reason())
        .Bind(10, StoredGid(Gid::FromRaw(entity.parent())));
    BindOptional(*upsert, 8, entity.has_exit_status(), entity.exit_status());
    BindOptional(*upsert, 9, entity.has_exit_signal(), entity.exit_signal());
    TOCL_RETURN_IF_ERROR(upsert->Run());

    TOCL_ASSIGN_OR_RETURN(ScopedStatement clear,
                          db.Cached("DELETE FROM endpoints WHERE process = ?1"));
    TOCL_RETURN_IF_ERROR(clear->Bind(1, stored).Run());
    TOCL_ASSIGN_OR_RETURN(
        ScopedStatement endpoint,
        db.Cached("INSERT INTO endpoints(process, subsystem, address) VALUES (?1, ?2, ?3)"));
    for (const pb::Endpoint& published : entity.endpoints()) {
      endpoint->Reset();
      TOCL_RETURN_IF_ERROR(endpoint->Bind(1, stored)
                               .Bind(2, published.subsystem())
                               .BindBlob(3, published.address())
                               .Run());
    }
  } else {
    TOCL_ASSIGN_OR_RETURN(
        ScopedStatement upsert,
        db.Cached("INSERT INTO threads(gid, name, state, started_at_us, exited_at_us, "
                  "exit_reason) VALUES (?1, ?2, ?3, ?4, ?5, ?6) "
                  "ON CONFLICT(gid) DO UPDATE SET name = excluded.name, state = excluded.state, "
                  "started_at_us = excluded.started_at_us, exited_at_us = excluded.exited_at_us, "
                  "exit_reason = excluded.exit_reason"));
    TOCL_RETURN_IF_ERROR(upsert->Bind(1, stored)
                             .Bind(2, entity.name())
                             .Bind(3, RowState(entity))
                             .Bind(4, entity.started_at_us())
                             .Bind(5, entity.exited_at_us())
                             .Bind(6, entity.exit_reason())
                             .Run());
  }
  TOCL_ASSIGN_OR_RETURN(ScopedStatement clear,
                        db.Cached("DELETE FROM attributes WHERE entity = ?1"));
  TOCL_RETURN_IF_ERROR(clear->Bind(1, stored).Run());
  return InsertAttributes(db, gid, entity.attributes());
}

// Deletes the replicated entities of one host with ids in [low, high]
// (raw gids) that `keep` does not name. Returns how many entities went.
Result<size_t> DeleteUnnamed(Database& db, uint64_t low, uint64_t high,
                             const std::set<uint64_t>& keep) {
  const int64_t stored_low = StoredGid(Gid::FromRaw(low));
  const int64_t stored_high = StoredGid(Gid::FromRaw(high));
  std::vector<int64_t> doomed;
  {
    TOCL_ASSIGN_OR_RETURN(
        ScopedStatement rows,
        db.Cached("SELECT gid FROM hosts WHERE gid BETWEEN ?1 AND ?2 "
                  "UNION ALL SELECT gid FROM processes WHERE gid BETWEEN ?1 AND ?2 "
                  "UNION ALL SELECT gid FROM threads WHERE gid BETWEEN ?1 AND ?2"));
    rows->Bind(1, stored_low).Bind(2, stored_high);
    for (;;) {
      TOCL_ASSIGN_OR_RETURN(bool row, rows->Step());
      if (!row) break;
      const int64_t stored = rows->ColumnInt(0);
      if (!keep.contains(GidFromStored(stored).raw())) doomed.push_back(stored);
    }
  }
  if (doomed.empty()) return size_t{0};
  for (int64_t stored : doomed) {
    TOCL_RETURN_IF_ERROR(DeleteEntityRows(db, GidFromStored(stored), /*with_threads=*/false));
  }
  // Their change-log rows stay: deleting the newest rows of the log would
  // let SQLite hand their sequence numbers out again (seq is a rowid, not
  // AUTOINCREMENT), and watchers past them would miss the new changes.
  // Readers give changes whose entity is gone a tombstone (ReadChanges).
  return doomed.size();
}

Status SetProgress(Database& db, Gid origin, uint64_t applied_seq) {
  TOCL_ASSIGN_OR_RETURN(
      ScopedStatement progress,
      db.Cached("INSERT INTO replicas(host, applied_seq) VALUES (?1, ?2) "
                "ON CONFLICT(host) DO UPDATE SET applied_seq = excluded.applied_seq"));
  return progress->Bind(1, StoredGid(origin))
      .Bind(2, static_cast<int64_t>(std::min<uint64_t>(applied_seq, INT64_MAX)))
      .Run();
}

// Records the highest process index of `origin` that `events` name (a
// Lookup of a lower index that has no row here was removed: store_retention.cc).
Status NoteHighestProcess(Database& db, Gid origin, std::span<const pb::ChangeEvent> events) {
  int64_t highest = 0;
  for (const pb::ChangeEvent& event : events) {
    highest = std::max<int64_t>(highest, Gid::FromRaw(event.gid()).process_index());
  }
  if (highest == 0) return Status::Ok();
  TOCL_ASSIGN_OR_RETURN(
      ScopedStatement note,
      db.Cached("INSERT INTO replicas(host, applied_seq, max_process) VALUES (?1, 0, ?2) "
                "ON CONFLICT(host) DO UPDATE SET max_process = "
                "max(max_process, excluded.max_process)"));
  return note->Bind(1, StoredGid(origin)).Bind(2, highest).Run();
}

uint64_t HostRangeHigh(Gid host) {
  return host.raw() | ((uint64_t{1} << 48) - 1);
}

}  // namespace

Result<uint32_t> Store::RecordedHostId(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return uint32_t{0};
  TOCL_ASSIGN_OR_RETURN(Database db, Database::Open(path, OpenMode::kReadOnly));
  TOCL_ASSIGN_OR_RETURN(
      int64_t has_meta,
      db.QueryInt("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'"));
  if (has_meta == 0) return uint32_t{0};
  TOCL_ASSIGN_OR_RETURN(
      int64_t recorded,
      db.QueryInt("SELECT coalesce((SELECT value FROM meta WHERE key = 'host_id'), 0)"));
  if (recorded < 0 || recorded > Gid::kMaxHost) {
    return DataLoss(
        fmt::format("{} records host id {}, outside 1..{}", path, recorded, Gid::kMaxHost));
  }
  return static_cast<uint32_t>(recorded);
}

Result<Gid> Store::AssignMember(std::string_view node_key, std::string_view name,
                                std::string_view address, Gid wanted) {
  if (node_key.empty()) return InvalidArgument("an empty node key");
  if (!wanted.is_null() && !wanted.is_host()) {
    return InvalidArgument(fmt::format("{} is not a host id", wanted.ToString()));
  }
  TOCL_RETURN_IF_ERROR(ValidateName("host", name));
  Gid assigned;
  TOCL_RETURN_IF_ERROR(writer_->Run([&](Database& db) -> Status {
    TOCL_ASSIGN_OR_RETURN(ScopedStatement known,
                          db.Cached("SELECT host FROM members WHERE node_key = ?1"));
    TOCL_ASSIGN_OR_RETURN(bool row, known->Bind(1, node_key).Step());
    if (row) {
      assigned = GidFromStored(known->ColumnInt(0));
    } else if (!wanted.is_null()) {
      known->Reset();
      TOCL_ASSIGN_OR_RETURN(ScopedStatement owner,
                            db.Cached("SELECT node_key, name, address FROM members "
                                      "WHERE host = ?1"));
      TOCL_ASSIGN_OR_RETURN(bool taken, owner->Bind(1, StoredGid(wanted)).Step());
      // A member learned by gossip has no key: the daemon that names it
      // first takes it (a seed that lost its database learns hosts that way).
      if (taken && !owner->ColumnText(0).empty()) {
        return AlreadyExists(fmt::format(
            "host id {} belongs to another daemon ('{}' at {}); start this one with another "
            "--host-id, or none to be given a free id",
            wanted.ToString(), owner->ColumnText(1), owner->ColumnText(2)));
      }
      assigned = wanted;
    } else {
      TOCL_ASSIGN_OR_RETURN(std::set<uint32_t> used, UsedHostIds(db));
      uint32_t id = 2;
      while (id <= Gid::kMaxHost && used.contains(id)) ++id;
      if (id > Gid::kMaxHost) {
        return ResourceExhausted(fmt::format("all {} host ids are taken", Gid::kMaxHost));
      }
      assigned = Gid::Host(id);
    }
    known->Reset();
    TOCL_ASSIGN_OR_RETURN(
        ScopedStatement record,
        db.Cached(
            "INSERT INTO members(host, name, address, node_key, joined_at_us) "
            "VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT(host) DO UPDATE SET "
            "name = excluded.name, address = excluded.address, node_key = excluded.node_key"));
    TOCL_RETURN_IF_ERROR(record->Bind(1, StoredGid(assigned))
                             .Bind(2, name)
                             .Bind(3, address)
                             .Bind(4, node_key)
                             .Bind(5, NowMicros())
                             .Run());
    if (assigned == host_) return Status::Ok();  // its own host row exists
    return EnsureMemberHostRow(db, assigned, name, address);
  }));
  return assigned;
}

Result<std::vector<MemberRow>> Store::Members() {
  TOCL_ASSIGN_OR_RETURN(ReaderPool::Lease lease, readers_->Acquire());
  Database& db = lease.db();
  TOCL_ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(db));
  std::vector<MemberRow> members;
  {
    TOCL_ASSIGN_OR_RETURN(ScopedStatement stmt,
                          db.Cached("SELECT host, name, address FROM members ORDER BY host"));
    for (;;) {
      TOCL_ASSIGN_OR_RETURN(bool row, stmt->Step());
      if (!row) break;
      members.push_back({GidFromStored(stmt->ColumnInt(0)), std::string(stmt->ColumnText(1)),
                         std::string(stmt->ColumnText(2))});
    }
  }
  // A daemon that is not the seed has no members row of its own: its host
  // row says the rest.
  auto self = std::find_if(members.begin(), members.end(),
                           [&](const MemberRow& member) { return member.host == host_; });
  if (self == members.end()) {
    TOCL_ASSIGN_OR_RETURN(pb::Entity own, LoadEntity(db, host_));
    members.push_back({host_, own.name(), own.address()});
    std::sort(members.begin(), members.end(),
              [](const MemberRow& a, const MemberRow& b) { return a.host < b.host; });
  }
  TOCL_RETURN_IF_ERROR(txn.Commit());
  return members;
}

Status Store::SaveMembers(std::span<const MemberRow> members) {
  for (const MemberRow& member : members) {
    if (!member.host.is_host()) {
      return InvalidArgument(fmt::format("member {} is not a host id", member.host.ToString()));
    }
    TOCL_RETURN_IF_ERROR(ValidateName("host", member.name).WithContext(member.host.ToString()));
  }
  return writer_->Run([&](Database& db) -> Status {
    for (const MemberRow& member : members) {
      if (member.host == host_) continue;
      TOCL_RETURN_IF_ERROR(UpsertMember(db, member));
    }
    return Status::Ok();
  });
}

Status Store::SetOwnAddress(std::string_view address) {
  return writer_->Run([&](Database& db) -> Status {
    TOCL_ASSIGN_OR_RETURN(
        ScopedStatement update,
        db.Cached("UPDATE hosts SET address = ?2 WHERE gid = ?1 AND address != ?2"));
    TOCL_RETURN_IF_ERROR(update->Bind(1, StoredGid(host_)).Bind(2, address).Run());
    if (sqlite3_changes(db.get()) == 0) return Status::Ok();
    return InsertChange(db, host_, kOpUpdated, NowMicros());
  });
}

Result<std::vector<pb::ChangeEvent>> Store::OwnChangesSince(uint64_t since, size_t max) {
  TOCL_ASSIGN_OR_RETURN(ReaderPool::Lease lease, readers_->Acquire());
  return ReadChanges(lease.db(), since, max, /*own_only=*/true);
}

Result<std::vector<pb::Entity>> Store::OwnEntitiesAfter(Gid after, size_t max) {
  auto [low, high] = StoredRange(host_);
  if (!after.is_null()) {
    if (after.host() != host_) {
      return InvalidArgument(
          fmt::format("{} is not an entity of {}", after.ToString(), host_.ToString()));
    }
    if (after.raw() == HostRangeHigh(host_)) return std::vector<pb::Entity>{};
    low = StoredGid(Gid::FromRaw(after.raw() + 1));
  }
  TOCL_ASSIGN_OR_RETURN(ReaderPool::Lease lease, readers_->Acquire());
  Database& db = lease.db();
  TOCL_ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(db));
  std::vector<int64_t> gids;
  {
    TOCL_ASSIGN_OR_RETURN(
        ScopedStatement stmt,
        db.Cached("SELECT gid FROM hosts WHERE gid BETWEEN ?1 AND ?2 "
                  "UNION ALL SELECT gid FROM processes WHERE gid BETWEEN ?1 AND ?2 "
                  "UNION ALL SELECT gid FROM threads WHERE gid BETWEEN ?1 AND ?2 "
                  "ORDER BY 1 LIMIT ?3"));
    stmt->Bind(1, low).Bind(2, high).Bind(3, static_cast<int64_t>(max));
    for (;;) {
      TOCL_ASSIGN_OR_RETURN(bool row, stmt->Step());
      if (!row) break;
      gids.push_back(stmt->ColumnInt(0));
    }
  }
  std::vector<pb::Entity> entities;
  entities.reserve(gids.size());
  for (int64_t stored : gids) {
    TOCL_ASSIGN_OR_RETURN(entities.emplace_back(), LoadEntity(db, GidFromStored(stored)));
  }
  TOCL_RETURN_IF_ERROR(txn.Commit());
  return entities;
}

Result<uint64_t> Store::ReplicaProgress(Gid origin) {
  TOCL_ASSIGN_OR_RETURN(ReaderPool::Lease lease, readers_->Acquire());
  TOCL_ASSIGN_OR_RETURN(ScopedStatement stmt,
                        lease.db().Cached("SELECT applied_seq FROM replicas WHERE host = ?1"));
  TOCL_ASSIGN_OR_RETURN(bool row, stmt->Bind(1, StoredGid(origin)).Step());
  return row ? static_cast<uint64_t>(stmt->ColumnInt(0)) : uint64_t{0};
}

Status Store::ApplyReplicated(Gid origin, std::span<const pb::ChangeEvent> events,
                              uint64_t applied_seq) {
  TOCL_RETURN_IF_ERROR(CheckOrigin(host_, origin));
  TOCL_RETURN_IF_ERROR(CheckEvents(origin, events));
  return writer_->Run([&](Database& db) -> Status {
    for (const pb::ChangeEvent& event : events) {
      // Reachability is each daemon's own observation; an origin never
      // sends it, and one that did is not believed.
      if (event.op() == pb::CHANGE_OP_UNREACHABLE || event.op() == pb::CHANGE_OP_REACHABLE) {
        continue;
      }
      const Gid gid = Gid::FromRaw(event.gid());
      if (event.op() == pb::CHANGE_OP_REMOVED || event.entity().removed()) {
        // Removed at the origin (its retention), so removed here: a
        // replica never removes rows on its own.
        TOCL_RETURN_IF_ERROR(DeleteEntityRows(db, gid, /*with_threads=*/true));
      } else {
        TOCL_RETURN_IF_ERROR(UpsertReplicatedEntity(db, event.entity()));
      }
      TOCL_RETURN_IF_ERROR(InsertChange(db, gid, event.op(), event.at_us(), OriginOf(origin)));
    }
    TOCL_RETURN_IF_ERROR(NoteHighestProcess(db, origin, events));
    return SetProgress(db, origin, applied_seq);
  });
}

Status Store::BeginSnapshot(Gid origin) {
  TOCL_RETURN_IF_ERROR(CheckOrigin(host_, origin));
  return writer_->Run([&](Database& db) -> Status {
    snapshot_cursor_[origin] = Gid();
    // The snapshot's pages say again which indexes the origin handed out: it
    // may be a new database that numbers from 1 again, whose processes must
    // not read as removed ones of the old.
    TOCL_ASSIGN_OR_RETURN(ScopedStatement forget,
                          db.Cached("UPDATE replicas SET max_process = 0 WHERE host = ?1"));
    return forget->Bind(1, StoredGid(origin)).Run();
  });
}

Status Store::ApplySnapshot(Gid origin, std::span<const pb::ChangeEvent> events) {
  TOCL_RETURN_IF_ERROR(CheckOrigin(host_, origin));
  TOCL_RETURN_IF_ERROR(CheckEvents(origin, events));
  return writer_->Run([&](Database& db) -> Status {
    auto cursor = snapshot_cursor_.find(origin);
    if (cursor == snapshot_cursor_.end()) {
      return FailedPrecondition(
          fmt::format("a snapshot page of {} before its snapshot began", origin.ToString()));
    }
    if (events.empty()) return Status::Ok();
    // Pages come in gid order, so each covers the id range from the previous
    // page's last gid to its own: what the range holds and the page does not
    // name is gone at the origin.
    std::set<uint64_t> named;
    uint64_t previous = cursor->second.raw();
    for (const pb::ChangeEvent& event : events) {
      if (event.gid() <= previous) {
        return InvalidArgument(fmt::format("snapshot of {}: {} is out of gid order",
                                           origin.ToString(),
                                           Gid::FromRaw(event.gid()).ToString()));
      }
      previous = event.gid();
      named.insert(event.gid());
    }
    const uint64_t low = cursor->second.is_null() ? origin.raw() : cursor->second.raw() + 1;
    TOCL_ASSIGN_OR_RETURN(size_t deleted, DeleteUnnamed(db, low, previous, named));
    if (deleted > 0) {
      spdlog::info("snapshot of {}: {} entities it no longer has were removed", origin.ToString(),
                   deleted);
    }
    for (const pb::ChangeEvent& event : events) {
      TOCL_RETURN_IF_ERROR(UpsertReplicatedEntity(db, event.entity()));
      TOCL_RETURN_IF_ERROR(
          InsertChange(db, Gid::FromRaw(event.gid()), kOpAdded, event.at_us(), OriginOf(origin)));
    }
    TOCL_RETURN_IF_ERROR(NoteHighestProcess(db, origin, events));
    cursor->second = Gid::FromRaw(previous);
    return Status::Ok();
  });
}

Status Store::FinishSnapshot(Gid origin, uint64_t applied_seq) {
  TOCL_RETURN_IF_ERROR(CheckOrigin(host_, origin));
  return writer_->Run([&](Database& db) -> Status {
    auto cursor = snapshot_cursor_.find(origin);
    if (cursor == snapshot_cursor_.end()) {
      return FailedPrecondition(
          fmt::format("the end of a snapshot of {} that did not begin", origin.ToString()));
    }
    const uint64_t high = HostRangeHigh(origin);
    if (cursor->second.raw() != high) {
      const uint64_t low = cursor->second.is_null() ? origin.raw() : cursor->second.raw() + 1;
      TOCL_ASSIGN_OR_RETURN(size_t deleted, DeleteUnnamed(db, low, high, {}));
      if (deleted > 0) {
        spdlog::info("snapshot of {}: {} entities it no longer has were removed", origin.ToString(),
                     deleted);
      }
    }
    snapshot_cursor_.erase(cursor);
    return SetProgress(db, origin, applied_seq);
  });
}

Status Store::SetReachable(Gid host, bool reachable) {
  TOCL_RETURN_IF_ERROR(CheckOrigin(host_, host));
  return writer_->Run([&](Database& db) -> Status {
    TOCL_ASSIGN_OR_RETURN(
        ScopedStatement update,
        db.Cached("UPDATE hosts SET reachable = ?2 WHERE gid = ?1 AND reachable != ?2"));
    TOCL_RETURN_IF_ERROR(update->Bind(1, StoredGid(host)).Bind(2, int64_t{reachable}).Run());
    if (sqlite3_changes(db.get()) == 0) return Status::Ok();
    return InsertChange(db, host, reachable ? kOpReachable : kOpUnreachable, NowMicros(),
                        OriginOf(host));
  });
}

Result<uint64_t> Store::TrimChangeLog(uint64_t keep) {
  if (keep == 0) return InvalidArgument("a change log must keep at least one change");
  uint64_t deleted = 0;
  TOCL_RETURN_IF_ERROR(writer_->Run([&](Database& db) -> Status {
    TOCL_ASSIGN_OR_RETURN(int64_t head, db.QueryInt("SELECT coalesce(max(seq), 0) FROM changes"));
    TOCL_ASSIGN_OR_RETURN(
        int64_t trimmed,
        db.QueryInt("SELECT coalesce((SELECT value FROM meta WHERE key = 'trimmed_through'), 0)"));
    const int64_t wanted = head - static_cast<int64_t>(std::min<uint64_t>(keep, INT64_MAX));
    if (wanted <= trimmed) return Status::Ok();
    // The newest change always stays: seqs are rowids, and an empty table
    // would number from 1 again.
    const int64_t cut = std::min(wanted, trimmed + kTrimBatch);
    TOCL_ASSIGN_OR_RETURN(ScopedStatement erase, db.Cached("DELETE FROM changes WHERE seq <= ?1"));
    TOCL_RETURN_IF_ERROR(erase->Bind(1, cut).Run());
    deleted = static_cast<uint64_t>(sqlite3_changes(db.get()));
    TOCL_ASSIGN_OR_RETURN(ScopedStatement mark,
                          db.Cached("INSERT INTO meta(key, value) VALUES ('trimmed_through', ?1) "
                                    "ON CONFLICT(key) DO UPDATE SET value = excluded.value"));
    return mark->Bind(1, cut).Run();
  }));
  return deleted;
}

Result<uint64_t> Store::TrimmedThrough() {
  TOCL_ASSIGN_OR_RETURN(ReaderPool::Lease lease, readers_->Acquire());
  TOCL_ASSIGN_OR_RETURN(
      int64_t trimmed,
      lease.db().QueryInt(
          "SELECT coalesce((SELECT value FROM meta WHERE key = 'trimmed_through'), 0)"));
  return static_cast<uint64_t>(trimmed);
}

}  // namespace tocl::directory
