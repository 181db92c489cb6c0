// The retention part of the Store: removing this host's entities that
// exited long enough ago, and what a Lookup says of them afterwards.
#include <fmt/format.h>

#include <optional>
#include <vector>

#include "store/reader_pool.h"
#include "store/rows.h"
#include "store/schema.h"
#include "store/store.h"

namespace tocl::directory {
namespace {

// The exited rows of one host, oldest exit first: the partial indexes
// processes_exited / threads_exited (schema migration 3) answer these, so
// running rows and other hosts' rows are never walked.
constexpr const char* kDueProcesses =
    "SELECT gid FROM processes WHERE state = 2 AND (gid >> 48) = (?1 >> 48) "
    "AND exited_at_us < ?2 ORDER BY exited_at_us LIMIT ?3";
constexpr const char* kDueThreads =
    "SELECT gid FROM threads WHERE state = 2 AND (gid >> 48) = (?1 >> 48) "
    "AND exited_at_us < ?2 ORDER BY exited_at_us LIMIT ?3";

Result<std::vector<int64_t>> Due(Database& db, const char* sql, Gid host, int64_t cutoff_us,
                                 size_t max) {
  TOCL_ASSIGN_OR_RETURN(ScopedStatement stmt, db.Cached(sql));
  stmt->Bind(1, StoredGid(host)).Bind(2, cutoff_us).Bind(3, static_cast<int64_t>(max));
  std::vector<int64_t> due;
  for (;;) {
    TOCL_ASSIGN_OR_RETURN(bool row, stmt->Step());
    if (!row) break;
    due.push_back(stmt->ColumnInt(0));
  }
  return due;
}

// Deletes up to `budget` threads of `process` (lowest ids first) with their
// attributes; returns how many went. A process with a million threads is
// removed over several writer operations this way.
Result<uint64_t> DeleteSomeThreads(Database& db, Gid process, uint64_t budget) {
  auto [low, high] = StoredRange(process);
  TOCL_ASSIGN_OR_RETURN(ScopedStatement slice,
                        db.Cached("SELECT count(*), max(gid) FROM (SELECT gid FROM threads "
                                  "WHERE gid BETWEEN ?1 AND ?2 ORDER BY gid LIMIT ?3)"));
  TOCL_ASSIGN_OR_RETURN(
      bool row, slice->Bind(1, low + 1).Bind(2, high).Bind(3, static_cast<int64_t>(budget)).Step());
  const int64_t count = row ? slice->ColumnInt(0) : 0;
  if (count == 0) return uint64_t{0};
  const int64_t last = slice->ColumnInt(1);
  slice->Reset();
  TOCL_ASSIGN_OR_RETURN(ScopedStatement threads,
                        db.Cached("DELETE FROM threads WHERE gid BETWEEN ?1 AND ?2"));
  TOCL_RETURN_IF_ERROR(threads->Bind(1, low + 1).Bind(2, last).Run());
  TOCL_ASSIGN_OR_RETURN(ScopedStatement attributes,
                        db.Cached("DELETE FROM attributes WHERE entity BETWEEN ?1 AND ?2"));
  TOCL_RETURN_IF_ERROR(attributes->Bind(1, low + 1).Bind(2, last).Run());
  return static_cast<uint64_t>(count);
}

// The highest process index `host` has handed out as far as `db` knows:
// this host's own counter, or the highest index the replica of another host
// has seen. Every index up to it had a row once (indexes only grow, in the
// transaction that writes the row), so a missing one was removed.
Result<int64_t> HighestProcessIndex(Database& db, Gid self, Gid host) {
  if (host == self) {
    TOCL_ASSIGN_OR_RETURN(
        int64_t next,
        db.QueryInt("SELECT coalesce((SELECT value FROM meta WHERE key = 'next_process'), 1)"));
    return next - 1;
  }
  TOCL_ASSIGN_OR_RETURN(ScopedStatement stmt,
                        db.Cached("SELECT max_process FROM replicas WHERE host = ?1"));
  TOCL_ASSIGN_OR_RETURN(bool row, stmt->Bind(1, StoredGid(host)).Step());
  return row ? stmt->ColumnInt(0) : int64_t{0};
}

Result<bool> HasRow(Database& db, Gid process) {
  TOCL_ASSIGN_OR_RETURN(ScopedStatement stmt, db.Cached("SELECT 1 FROM processes WHERE gid = ?1"));
  return stmt->Bind(1, StoredGid(process)).Step();
}

}  // namespace

Result<Removal> Store::RemoveExited(int64_t cutoff_us, size_t max_entities) {
  if (max_entities == 0) return InvalidArgument("a removal batch of 0 entities");
  Removal removal;
  TOCL_RETURN_IF_ERROR(writer_->Run([&](Database& db) -> Status {
    removal = Removal{};
    uint64_t budget = max_entities;
    const int64_t now = NowMicros();
    TOCL_ASSIGN_OR_RETURN(std::vector<int64_t> processes,
                          Due(db, kDueProcesses, host_, cutoff_us, budget));
    for (int64_t stored : processes) {
      const Gid process = GidFromStored(stored);
      TOCL_ASSIGN_OR_RETURN(uint64_t threads, DeleteSomeThreads(db, process, budget));
      removal.threads += threads;
      budget -= threads;
      if (budget == 0) {
        // Threads may be left: the process row stays (still exited, still
        // due) and the next call goes on with it.
        removal.more = true;
        return Status::Ok();
      }
      TOCL_RETURN_IF_ERROR(DeleteEntityRows(db, process, /*with_threads=*/false));
      TOCL_RETURN_IF_ERROR(InsertChange(db, process, kOpRemoved, now));
      // What the store kept in memory of it goes with its rows (a removed
      // process never enrolls again).
      resumes_.erase(process);
      default_named_.erase(process);
      removal.processes.push_back(process);
      --budget;
    }
    if (budget == 0) {
      removal.more = true;
      return Status::Ok();
    }
    // Every due process is gone, so a due thread left belongs to a process
    // that runs, or exited later than the thread did.
    TOCL_ASSIGN_OR_RETURN(std::vector<int64_t> threads,
                          Due(db, kDueThreads, host_, cutoff_us, budget));
    for (int64_t stored : threads) {
      const Gid thread = GidFromStored(stored);
      TOCL_RETURN_IF_ERROR(DeleteEntityRows(db, thread, /*with_threads=*/false));
      TOCL_RETURN_IF_ERROR(InsertChange(db, thread, kOpRemoved, now));
    }
    removal.threads += threads.size();
    removal.more = threads.size() == budget;
    return Status::Ok();
  }));
  return removal;
}

Result<bool> Store::HasExitedBefore(int64_t cutoff_us) {
  TOCL_ASSIGN_OR_RETURN(ReaderPool::Lease lease, readers_->Acquire());
  TOCL_ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(lease.db()));
  TOCL_ASSIGN_OR_RETURN(std::vector<int64_t> processes,
                        Due(lease.db(), kDueProcesses, host_, cutoff_us, 1));
  if (!processes.empty()) return true;
  TOCL_ASSIGN_OR_RETURN(std::vector<int64_t> threads,
                        Due(lease.db(), kDueThreads, host_, cutoff_us, 1));
  TOCL_RETURN_IF_ERROR(txn.Commit());
  return !threads.empty();
}

Result<pb::Entity> Store::LookupMissing(Database& db, Gid gid) {
  const Gid process = gid.process();
  TOCL_ASSIGN_OR_RETURN(int64_t highest, HighestProcessIndex(db, host_, gid.host()));
  const bool existed = process.process_index() <= highest;
  if (existed && gid.is_process()) return Tombstone(gid, kRemovedReason);
  if (existed) {
    TOCL_ASSIGN_OR_RETURN(bool process_row, HasRow(db, process));
    if (!process_row) {
      return Tombstone(gid, fmt::format("its process {} {}", process.ToString(), kRemovedReason));
    }
  }
  return NotFound(fmt::format("no entity {}", gid.ToString()));
}

}  // namespace tocl::directory
