#include "database_file.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <filesystem>
#include <utility>

namespace tocl::testing {
namespace {

Status SqliteError(sqlite3* db, std::string_view what) {
  return Internal(fmt::format("{}: {}", what, db != nullptr ? sqlite3_errmsg(db) : "no memory"));
}

}  // namespace

std::string RowCounts::ToString() const {
  return fmt::format(
      "hosts={} processes={} (running {}) threads={} (running {}) attributes={} endpoints={} "
      "changes={}",
      hosts, processes, running_processes, threads, running_threads, attributes, endpoints,
      changes);
}

Result<DatabaseFile> DatabaseFile::Open(const std::string& path, bool read_only) {
  sqlite3* db = nullptr;
  int flags = read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE;
  int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    Status status = SqliteError(db, "open " + path);
    sqlite3_close(db);
    return status;
  }
  sqlite3_busy_timeout(db, 10000);
  return DatabaseFile(db);
}

DatabaseFile::DatabaseFile(DatabaseFile&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)) {}

DatabaseFile::~DatabaseFile() {
  if (db_ != nullptr) sqlite3_close(db_);
}

Result<std::vector<std::string>> DatabaseFile::QueryTexts(const std::string& sql) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
    return SqliteError(db_, sql);
  }
  std::vector<std::string> rows;
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    const unsigned char* text = sqlite3_column_text(stmt, 0);
    rows.emplace_back(text != nullptr ? reinterpret_cast<const char*>(text) : "");
  }
  sqlite3_finalize(stmt);
  if (rc != SQLITE_DONE) return SqliteError(db_, sql);
  return rows;
}

Result<std::vector<int64_t>> DatabaseFile::QueryInts(const std::string& sql) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
    return SqliteError(db_, sql);
  }
  std::vector<int64_t> rows;
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) rows.push_back(sqlite3_column_int64(stmt, 0));
  sqlite3_finalize(stmt);
  if (rc != SQLITE_DONE) return SqliteError(db_, sql);
  return rows;
}

Result<int64_t> DatabaseFile::QueryInt(const std::string& sql) {
  TOCL_ASSIGN_OR_RETURN(std::vector<int64_t> rows, QueryInts(sql));
  if (rows.empty()) return NotFound("no row: " + sql);
  return rows.front();
}

Result<std::string> DatabaseFile::IntegrityCheck() {
  TOCL_ASSIGN_OR_RETURN(std::vector<std::string> rows, QueryTexts("PRAGMA integrity_check"));
  std::string joined;
  for (const std::string& row : rows) joined += (joined.empty() ? "" : "\n") + row;
  return joined;
}

Result<RowCounts> DatabaseFile::CountRows() {
  // One read transaction: all counts from one snapshot.
  TOCL_RETURN_IF_ERROR(QueryInts("BEGIN").status());
  RowCounts counts;
  auto count = [&](const char* sql, int64_t& out) -> Status {
    TOCL_ASSIGN_OR_RETURN(out, QueryInt(sql));
    return Status::Ok();
  };
  Status status = count("SELECT count(*) FROM hosts", counts.hosts);
  if (status.ok()) status = count("SELECT count(*) FROM processes", counts.processes);
  if (status.ok()) status = count("SELECT count(*) FROM threads", counts.threads);
  if (status.ok()) status = count("SELECT count(*) FROM attributes", counts.attributes);
  if (status.ok()) status = count("SELECT count(*) FROM endpoints", counts.endpoints);
  if (status.ok()) status = count("SELECT coalesce(max(seq), 0) FROM changes", counts.changes);
  if (status.ok()) {
    status = count("SELECT count(*) FROM processes WHERE state = 1", counts.running_processes);
  }
  if (status.ok()) {
    status = count("SELECT count(*) FROM threads WHERE state = 1", counts.running_threads);
  }
  (void)QueryInts("COMMIT");
  if (!status.ok()) return status;
  return counts;
}

Result<std::unordered_set<int64_t>> DatabaseFile::ThreadGids() {
  TOCL_ASSIGN_OR_RETURN(std::vector<int64_t> rows, QueryInts("SELECT gid FROM threads"));
  return std::unordered_set<int64_t>(rows.begin(), rows.end());
}

Result<std::string> CopyDatabase(const std::string& db_path, const std::string& to_dir) {
  namespace fs = std::filesystem;
  const std::string copy = (fs::path(to_dir) / fs::path(db_path).filename()).string();
  std::error_code error;
  fs::copy_file(db_path, copy, fs::copy_options::overwrite_existing, error);
  if (error) return Internal(fmt::format("copy {}: {}", db_path, error.message()));
  fs::remove(copy + "-shm", error);
  fs::remove(copy + "-wal", error);
  if (fs::exists(db_path + "-wal")) {
    fs::copy_file(db_path + "-wal", copy + "-wal", fs::copy_options::overwrite_existing, error);
    if (error) return Internal(fmt::format("copy {}-wal: {}", db_path, error.message()));
  }
  return copy;
}

Result<RowCounts> CountRows(const std::string& path) {
  TOCL_ASSIGN_OR_RETURN(DatabaseFile db, DatabaseFile::Open(path));
  return db.CountRows();
}

}  // namespace tocl::testing
