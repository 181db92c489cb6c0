// Direct read access to a toclsd database file, to check from outside the
// daemon what it stored (crash durability, "the database is unchanged").
//
//   auto db = REQUIRE_VALUE(DatabaseFile::Open(daemon.db_path()));
//   REQUIRE(REQUIRE_VALUE(db.IntegrityCheck()) == "ok");
//
// Thread ids are stored as INTEGER = bit_cast<int64_t>(gid.raw()).
// Opening a live database read-only is safe (WAL); to look at the files a
// crashed daemon left without recovering them in place, CopyDatabase()
// first. Move-only; one thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "tocl/status.h"

struct sqlite3;

namespace tocl::testing {

// Rows of each table and the newest change sequence number.
struct RowCounts {
  int64_t hosts = 0;
  int64_t processes = 0;
  int64_t threads = 0;
  int64_t attributes = 0;
  int64_t endpoints = 0;
  int64_t changes = 0;
  int64_t running_processes = 0;
  int64_t running_threads = 0;

  friend bool operator==(const RowCounts&, const RowCounts&) = default;
  std::string ToString() const;
};

class DatabaseFile {
 public:
  static Result<DatabaseFile> Open(const std::string& path, bool read_only = true);
  DatabaseFile(DatabaseFile&& other) noexcept;
  DatabaseFile& operator=(DatabaseFile&&) = delete;
  DatabaseFile(const DatabaseFile&) = delete;
  DatabaseFile& operator=(const DatabaseFile&) = delete;
  ~DatabaseFile();

  // The first column of every row.
  Result<std::vector<std::string>> QueryTexts(const std::string& sql);
  Result<std::vector<int64_t>> QueryInts(const std::string& sql);
  // The first column of the first row (NotFound when there is none).
  Result<int64_t> QueryInt(const std::string& sql);

  // PRAGMA integrity_check, rows joined by newlines: "ok" when sound.
  Result<std::string> IntegrityCheck();
  Result<RowCounts> CountRows();
  // Every gid in the threads table.
  Result<std::unordered_set<int64_t>> ThreadGids();

 private:
  explicit DatabaseFile(sqlite3* db) : db_(db) {}
  sqlite3* db_ = nullptr;  // owned
};

// Copies directory.db and its -wal (when present) into `to_dir`; returns
// the copy's path. The -shm is not copied: SQLite rebuilds it.
Result<std::string> CopyDatabase(const std::string& db_path, const std::string& to_dir);

// Counts rows of the database at `path` (opened read-only for the call).
Result<RowCounts> CountRows(const std::string& path);

}  // namespace tocl::testing
