// The store's part for processes a daemon spawns: their row exists before
// the program starts (so the child is told its Gid), and their exit status
// may arrive after the row was marked exited.
#include <fmt/format.h>

#include <set>
#include <string>

#include "store/limits.h"
#include "store/reader_pool.h"
#include "store/rows.h"
#include "store/schema.h"
#include "store/store.h"

namespace tocl::directory {

Result<Enrollment> Store::ReserveProcess(
    std::string_view name, bool name_given,
    const google::protobuf::RepeatedPtrField<pb::Attribute>& attributes, Gid parent) {
  TOCL_RETURN_IF_ERROR(ValidateName("process", name));
  TOCL_RETURN_IF_ERROR(ValidateAttributes(attributes));
  if (parent.raw() != 0 && !parent.valid()) {
    return InvalidArgument(fmt::format("parent {} is not a valid id", parent.ToString()));
  }
  Enrollment enrollment;
  enrollment.session_token = NewSessionToken();
  TOCL_RETURN_IF_ERROR(writer_->Run([&](Database& db) -> Status {
    TOCL_ASSIGN_OR_RETURN(Gid gid, AllocateProcessGid(db, host_));
    const int64_t now = NowMicros();
    // os_pid 0 until the child enrolls (ResumeProcess records it).
    TOCL_ASSIGN_OR_RETURN(ScopedStatement insert,
                          db.Cached("INSERT INTO processes(gid, name, os_pid, state, "
                                    "started_at_us, session_token, parent) "
                                    "VALUES (?1, ?2, 0, 1, ?3, ?4, ?5)"));
    TOCL_RETURN_IF_ERROR(insert->Bind(1, StoredGid(gid))
                             .Bind(2, name)
                             .Bind(3, now)
                             .BindBlob(4, enrollment.session_token)
                             .Bind(5, StoredGid(parent))
                             .Run());
    TOCL_RETURN_IF_ERROR(InsertAttributes(db, gid, attributes));
    TOCL_RETURN_IF_ERROR(InsertChange(db, gid, kOpAdded, now));
    enrollment.gid = gid;
    if (!name_given) default_named_.insert(gid);
    return Status::Ok();
  }));
  return enrollment;
}

// The spawn decided where and as what this process runs, so on a clash
// its word wins: its name when it gave one, its value for a key both
// give. The process's own name (when the spawn gave none) and attributes
// the spawn did not set are kept. A process that re-enrolls (after a
// daemon restart) says again what its row already has: nothing changes.
Result<bool> Store::AdoptOwnIdentity(Database& db, Gid gid, const pb::EnrollRegister& own) {
  if (!own.name().empty()) TOCL_RETURN_IF_ERROR(ValidateName("process", own.name()));
  TOCL_RETURN_IF_ERROR(ValidateAttributes(own.attributes()));
  bool changed = false;
  if (default_named_.erase(gid) > 0 && !own.name().empty()) {
    TOCL_ASSIGN_OR_RETURN(
        ScopedStatement rename,
        db.Cached("UPDATE processes SET name = ?2 WHERE gid = ?1 AND name IS NOT ?2"));
    TOCL_RETURN_IF_ERROR(rename->Bind(1, StoredGid(gid)).Bind(2, own.name()).Run());
    changed = sqlite3_changes(db.get()) > 0;
  }
  if (own.attributes().empty()) return changed;
  std::set<std::string, std::less<>> keys;
  {
    TOCL_ASSIGN_OR_RETURN(ScopedStatement read,
                          db.Cached("SELECT key FROM attributes WHERE entity = ?1"));
    read->Bind(1, StoredGid(gid));
    for (;;) {
      TOCL_ASSIGN_OR_RETURN(bool row, read->Step());
      if (!row) break;
      keys.emplace(read->ColumnText(0));
    }
  }
  google::protobuf::RepeatedPtrField<pb::Attribute> added;
  for (const pb::Attribute& attribute : own.attributes()) {
    if (!keys.contains(attribute.key())) *added.Add() = attribute;
  }
  if (added.empty()) return changed;
  if (keys.size() + static_cast<size_t>(added.size()) > kMaxAttributesPerEntity) {
    return InvalidArgument(fmt::format(
        "process {}: its {} own attributes and the {} its spawn gave make {} (at most {})",
        gid.ToString(), own.attributes_size(), keys.size(),
        keys.size() + static_cast<size_t>(added.size()), kMaxAttributesPerEntity));
  }
  TOCL_RETURN_IF_ERROR(InsertAttributes(db, gid, added));
  return true;
}

Status Store::RecordSpawnedPid(Gid process, int64_t os_pid) {
  return writer_->Run([&](Database& db) -> Status {
    // Only while the child has not enrolled yet (which records it too).
    TOCL_ASSIGN_OR_RETURN(
        ScopedStatement set,
        db.Cached("UPDATE processes SET os_pid = ?2 WHERE gid = ?1 AND os_pid = 0 AND state = 1"));
    TOCL_RETURN_IF_ERROR(set->Bind(1, StoredGid(process)).Bind(2, os_pid).Run());
    if (sqlite3_changes(db.get()) == 0) return Status::Ok();
    return InsertChange(db, process, kOpUpdated, NowMicros());
  });
}

Status Store::RecordExitStatus(Gid process, ExitStatus status) {
  if (!process.is_process()) {
    return InvalidArgument(fmt::format("{} is not a process id", process.ToString()));
  }
  if (!status.code && !status.signal) return Status::Ok();
  return writer_->Run([&](Database& db) -> Status {
    // Only a status not known yet: a reaped process has one status, and
    // recording it twice would be a second change for nothing.
    TOCL_ASSIGN_OR_RETURN(ScopedStatement set,
                          db.Cached("UPDATE processes SET exit_status = ?2, exit_signal = ?3 "
                                    "WHERE gid = ?1 AND state = 2 AND exit_status IS NULL "
                                    "AND exit_signal IS NULL"));
    set->Bind(1, StoredGid(process));
    if (status.code)
      set->Bind(2, int64_t{*status.code});
    else
      set->BindNull(2);
    if (status.signal)
      set->Bind(3, int64_t{*status.signal});
    else
      set->BindNull(3);
    TOCL_RETURN_IF_ERROR(set->Run());
    if (sqlite3_changes(db.get()) == 0) return Status::Ok();
    return InsertChange(db, process, kOpUpdated, NowMicros());
  });
}

Result<uint64_t> Store::RunningProcessCount(Gid host) {
  if (!host.is_host()) return InvalidArgument(fmt::format("{} is not a host id", host.ToString()));
  auto [low, high] = StoredRange(host);
  TOCL_ASSIGN_OR_RETURN(ReaderPool::Lease lease, readers_->Acquire());
  TOCL_ASSIGN_OR_RETURN(
      ScopedStatement count,
      lease.db().Cached(
          "SELECT count(*) FROM processes WHERE gid BETWEEN ?1 AND ?2 AND state = 1"));
  TOCL_ASSIGN_OR_RETURN(bool row, count->Bind(1, low).Bind(2, high).Step());
  return row ? static_cast<uint64_t>(count->ColumnInt(0)) : 0;
}

}  // namespace tocl::directory
