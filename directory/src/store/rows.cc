#include "store/rows.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

namespace tocl::directory {

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string NewSessionToken() {
  // std::random_device reads the kernel's getrandom() on Linux.
  std::random_device random;
  std::string token(16, '\0');
  for (size_t i = 0; i < token.size(); i += 4) {
    uint32_t word = random();
    for (size_t j = 0; j < 4; ++j) token[i + j] = static_cast<char>(word >> (8 * j));
  }
  return token;
}

Result<Gid> AllocateProcessGid(Database& db, Gid host) {
  // Process indexes are never reused while the database lives: the
  // counter only grows, in the same transaction as the row it numbers.
  TOCL_ASSIGN_OR_RETURN(ScopedStatement next,
                        db.Cached("SELECT value FROM meta WHERE key = 'next_process'"));
  TOCL_ASSIGN_OR_RETURN(bool row, next->Step());
  int64_t index = row ? next->ColumnInt(0) : 1;
  if (index > int64_t{Gid::kMaxProcess}) {
    return ResourceExhausted(
        fmt::format("host {} has used all {} process ids", host.ToString(), Gid::kMaxProcess));
  }
  TOCL_ASSIGN_OR_RETURN(ScopedStatement bump,
                        db.Cached("INSERT INTO meta(key, value) VALUES ('next_process', ?1) "
                                  "ON CONFLICT(key) DO UPDATE SET value = excluded.value"));
  TOCL_RETURN_IF_ERROR(bump->Bind(1, index + 1).Run());
  return Gid::Process(host.host_index(), static_cast<uint32_t>(index));
}

// Stored bounds of every id under `parent` (the parent itself included).
std::pair<int64_t, int64_t> StoredRange(Gid parent) {
  uint64_t span = parent.is_host() ? (uint64_t{1} << 48) - 1 : uint64_t{Gid::kMaxThread};
  return {StoredGid(parent), StoredGid(Gid::FromRaw(parent.raw() | span))};
}

Status InsertChange(Database& db, Gid gid, int64_t op, int64_t at_us, int64_t origin) {
  TOCL_ASSIGN_OR_RETURN(
      ScopedStatement stmt,
      db.Cached("INSERT INTO changes(gid, op, at_us, origin) VALUES (?1, ?2, ?3, ?4)"));
  return stmt->Bind(1, StoredGid(gid)).Bind(2, op).Bind(3, at_us).Bind(4, origin).Run();
}

uint64_t LastChangeSeq(Database& db) {
  return static_cast<uint64_t>(sqlite3_last_insert_rowid(db.get()));
}

Status InsertAttributes(Database& db, Gid gid,
                        const google::protobuf::RepeatedPtrField<pb::Attribute>& attributes) {
  if (attributes.empty()) return Status::Ok();
  TOCL_ASSIGN_OR_RETURN(
      ScopedStatement stmt,
      db.Cached("INSERT INTO attributes(entity, key, value, kind) VALUES (?1, ?2, ?3, ?4)"));
  for (const auto& attribute : attributes) {
    stmt->Reset();
    TOCL_RETURN_IF_ERROR(stmt->Bind(1, StoredGid(gid))
                             .Bind(2, attribute.key())
                             .Bind(3, attribute.value())
                             .Bind(4, KindOf(gid))
                             .Run());
  }
  return Status::Ok();
}

Status MarkExitedLocked(Database& db, Gid process, std::string_view reason, ExitStatus status) {
  int64_t now = NowMicros();
  TOCL_ASSIGN_OR_RETURN(
      ScopedStatement mark,
      db.Cached("UPDATE processes SET state = 2, exited_at_us = ?2, exit_reason = ?3, "
                "exit_status = ?4, exit_signal = ?5 WHERE gid = ?1 AND state = 1"));
  mark->Bind(1, StoredGid(process)).Bind(2, now).Bind(3, reason);
  if (status.code)
    mark->Bind(4, int64_t{*status.code});
  else
    mark->BindNull(4);
  if (status.signal)
    mark->Bind(5, int64_t{*status.signal});
  else
    mark->BindNull(5);
  TOCL_RETURN_IF_ERROR(mark->Run());
  if (sqlite3_changes(db.get()) == 0) return Status::Ok();  // not running: nothing to do

  auto [low, high] = StoredRange(process);
  TOCL_ASSIGN_OR_RETURN(
      ScopedStatement threads,
      db.Cached("SELECT gid FROM threads WHERE gid BETWEEN ?1 AND ?2 AND state = 1"));
  threads->Bind(1, low).Bind(2, high);
  std::vector<int64_t> exited;
  for (;;) {
    TOCL_ASSIGN_OR_RETURN(bool row, threads->Step());
    if (!row) break;
    exited.push_back(threads->ColumnInt(0));
  }
  TOCL_ASSIGN_OR_RETURN(
      ScopedStatement mark_threads,
      db.Cached("UPDATE threads SET state = 2, exited_at_us = ?3, exit_reason = ?4 "
                "WHERE gid BETWEEN ?1 AND ?2 AND state = 1"));
  TOCL_RETURN_IF_ERROR(mark_threads->Bind(1, low).Bind(2, high).Bind(3, now).Bind(4, reason).Run());
  for (int64_t thread : exited) {
    TOCL_RETURN_IF_ERROR(InsertChange(db, GidFromStored(thread), kOpExited, now));
  }
  return InsertChange(db, process, kOpExited, now);
}

pb::Entity Tombstone(Gid gid, std::string reason) {
  pb::Entity entity;
  entity.set_gid(gid.raw());
  entity.set_kind(gid.is_host() ? pb::HOST : gid.is_process() ? pb::PROCESS : pb::THREAD);
  entity.set_state(pb::EXITED);
  entity.set_exit_reason(std::move(reason));
  entity.set_removed(true);
  return entity;
}

Result<pb::Entity> LoadEntity(Database& db, Gid gid) {
  if (!gid.valid()) return InvalidArgument(fmt::format("invalid id {}", gid.ToString()));
  pb::Entity entity;
  entity.set_gid(gid.raw());
  ScopedStatement row;
  if (gid.is_host()) {
    entity.set_kind(pb::HOST);
    TOCL_ASSIGN_OR_RETURN(row, db.Cached("SELECT name, state, started_at_us, exited_at_us, "
                                         "exit_reason, reachable, address FROM hosts "
                                         "WHERE gid = ?1"));
  } else if (gid.is_process()) {
    entity.set_kind(pb::PROCESS);
    TOCL_ASSIGN_OR_RETURN(
        row, db.Cached("SELECT name, state, started_at_us, exited_at_us, exit_reason, os_pid, "
                       "exit_status, exit_signal, parent FROM processes WHERE gid = ?1"));
  } else {
    entity.set_kind(pb::THREAD);
    TOCL_ASSIGN_OR_RETURN(row, db.Cached("SELECT name, state, started_at_us, exited_at_us, "
                                         "exit_reason FROM threads WHERE gid = ?1"));
  }
  TOCL_ASSIGN_OR_RETURN(bool found, row->Bind(1, StoredGid(gid)).Step());
  if (!found) return NotFound(fmt::format("no entity {}", gid.ToString()));
  entity.set_name(std::string(row->ColumnText(0)));
  const bool running = row->ColumnInt(1) == kStateRunning;
  entity.set_state(running ? pb::RUNNING : pb::EXITED);
  entity.set_started_at_us(row->ColumnInt(2));
  entity.set_exited_at_us(row->ColumnInt(3));
  entity.set_exit_reason(std::string(row->ColumnText(4)));
  if (gid.is_host()) {
    if (running && row->ColumnInt(5) == 0) entity.set_state(pb::UNREACHABLE);
    entity.set_address(std::string(row->ColumnText(6)));
  }
  if (gid.is_process()) {
    entity.set_os_pid(row->ColumnInt(5));
    if (!row->ColumnIsNull(6)) entity.set_exit_status(static_cast<int32_t>(row->ColumnInt(6)));
    if (!row->ColumnIsNull(7)) entity.set_exit_signal(static_cast<int32_t>(row->ColumnInt(7)));
    entity.set_parent(GidFromStored(row->ColumnInt(8)).raw());
  }
  // A running process or thread of a host that is down reads as unreachable.
  if (running && !gid.is_host()) {
    TOCL_ASSIGN_OR_RETURN(bool reachable, HostReachable(db, gid.host()));
    if (!reachable) entity.set_state(pb::UNREACHABLE);
  }

  TOCL_ASSIGN_OR_RETURN(
      ScopedStatement attributes,
      db.Cached("SELECT key, value FROM attributes WHERE entity = ?1 ORDER BY key"));
  attributes->Bind(1, StoredGid(gid));
  for (;;) {
    TOCL_ASSIGN_OR_RETURN(bool more, attributes->Step());
    if (!more) break;
    pb::Attribute* attribute = entity.add_attributes();
    attribute->set_key(std::string(attributes->ColumnText(0)));
    attribute->set_value(std::string(attributes->ColumnText(1)));
  }
  if (gid.is_process()) {
    TOCL_ASSIGN_OR_RETURN(
        ScopedStatement endpoints,
        db.Cached(
            "SELECT subsystem, address FROM endpoints WHERE process = ?1 ORDER BY subsystem"));
    endpoints->Bind(1, StoredGid(gid));
    for (;;) {
      TOCL_ASSIGN_OR_RETURN(bool more, endpoints->Step());
      if (!more) break;
      pb::Endpoint* endpoint = entity.add_endpoints();
      endpoint->set_subsystem(std::string(endpoints->ColumnText(0)));
      endpoint->set_address(std::string(endpoints->ColumnBlob(1)));
    }
  }
  return entity;
}

Status DeleteEntityRows(Database& db, Gid gid, bool with_threads) {
  const int64_t stored = StoredGid(gid);
  const char* table = gid.is_host() ? "hosts" : gid.is_process() ? "processes" : "threads";
  TOCL_ASSIGN_OR_RETURN(ScopedStatement row,
                        db.Cached(fmt::format("DELETE FROM {} WHERE gid = ?1", table)));
  TOCL_RETURN_IF_ERROR(row->Bind(1, stored).Run());
  TOCL_ASSIGN_OR_RETURN(ScopedStatement attributes,
                        db.Cached("DELETE FROM attributes WHERE entity = ?1"));
  TOCL_RETURN_IF_ERROR(attributes->Bind(1, stored).Run());
  if (!gid.is_process()) return Status::Ok();
  TOCL_ASSIGN_OR_RETURN(ScopedStatement endpoints,
                        db.Cached("DELETE FROM endpoints WHERE process = ?1"));
  TOCL_RETURN_IF_ERROR(endpoints->Bind(1, stored).Run());
  if (!with_threads) return Status::Ok();
  // Threads are the ids after the process's own in its range (primary-key
  // range deletes, attributes by their (entity, key) key).
  auto [low, high] = StoredRange(gid);
  TOCL_ASSIGN_OR_RETURN(ScopedStatement threads,
                        db.Cached("DELETE FROM threads WHERE gid BETWEEN ?1 AND ?2"));
  TOCL_RETURN_IF_ERROR(threads->Bind(1, low + 1).Bind(2, high).Run());
  TOCL_ASSIGN_OR_RETURN(ScopedStatement thread_attributes,
                        db.Cached("DELETE FROM attributes WHERE entity BETWEEN ?1 AND ?2"));
  return thread_attributes->Bind(1, low + 1).Bind(2, high).Run();
}

Result<bool> HostReachable(Database& db, Gid host) {
  TOCL_ASSIGN_OR_RETURN(ScopedStatement stmt,
                        db.Cached("SELECT reachable FROM hosts WHERE gid = ?1"));
  TOCL_ASSIGN_OR_RETURN(bool row, stmt->Bind(1, StoredGid(host)).Step());
  bool reachable = !row || stmt->ColumnInt(0) != 0;
  stmt->Reset();
  return reachable;
}

Result<std::vector<pb::ChangeEvent>> ReadChanges(Database& db, uint64_t since, size_t max,
                                                 bool own_only, uint32_t op_mask) {
  TOCL_ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(db));
  std::vector<pb::ChangeEvent> events;
  {
    TOCL_ASSIGN_OR_RETURN(
        ScopedStatement stmt,
        db.Cached(own_only ? "SELECT seq, gid, op, at_us FROM changes "
                             "WHERE seq > ?1 AND origin = 0 ORDER BY seq LIMIT ?2"
                           : "SELECT seq, gid, op, at_us FROM changes "
                             "WHERE seq > ?1 AND (?3 = 0 OR ((1 << op) & ?3) != 0) "
                             "ORDER BY seq LIMIT ?2"));
    stmt->Bind(1, static_cast<int64_t>(std::min<uint64_t>(since, INT64_MAX)))
        .Bind(2, static_cast<int64_t>(max));
    if (!own_only) stmt->Bind(3, int64_t{op_mask});
    for (;;) {
      TOCL_ASSIGN_OR_RETURN(bool row, stmt->Step());
      if (!row) break;
      pb::ChangeEvent& event = events.emplace_back();
      event.set_seq(static_cast<uint64_t>(stmt->ColumnInt(0)));
      event.set_gid(GidFromStored(stmt->ColumnInt(1)).raw());
      event.set_op(static_cast<pb::ChangeOp>(stmt->ColumnInt(2)));
      event.set_at_us(stmt->ColumnInt(3));
    }
  }
  for (pb::ChangeEvent& event : events) {
    const Gid gid = Gid::FromRaw(event.gid());
    Result<pb::Entity> entity = LoadEntity(db, gid);
    if (entity.status().code() == StatusCode::kNotFound) {
      // Removed since (retention, or a snapshot of a host whose database
      // was replaced): its older change rows stay until the log is trimmed.
      *event.mutable_entity() = Tombstone(gid, kRemovedReason);
      continue;
    }
    TOCL_RETURN_IF_ERROR(entity.status());
    *event.mutable_entity() = std::move(*entity);
  }
  TOCL_RETURN_IF_ERROR(txn.Commit());
  return events;
}

}  // namespace tocl::directory
