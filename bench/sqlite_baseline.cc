#include "sqlite_baseline.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>

#include "store/schema.h"

namespace tocl::bench {
namespace {

// The daemon's settings (ConfigureConnection), page cache included.
constexpr const char* kPragmas =
    "PRAGMA synchronous=FULL; PRAGMA cache_size=-8192; PRAGMA temp_store=MEMORY;";

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Result<std::unique_ptr<SqliteBaseline>> SqliteBaseline::Create(const std::string& path) {
  if (std::filesystem::exists(path)) {
    return AlreadyExists(fmt::format("baseline database {} exists already", path));
  }
  std::unique_ptr<SqliteBaseline> baseline(new SqliteBaseline(path));
  TOCL_ASSIGN_OR_RETURN(baseline->db_,
                        directory::Database::Open(path, directory::OpenMode::kReadWrite));
  TOCL_RETURN_IF_ERROR(baseline->Exec("PRAGMA journal_mode=WAL"));
  TOCL_RETURN_IF_ERROR(baseline->Exec(kPragmas));
  // The daemon's own schema (every table and index it has), so the rows
  // written cost exactly what they cost the daemon.
  TOCL_RETURN_IF_ERROR(directory::Migrate(baseline->db_));
  TOCL_RETURN_IF_ERROR(baseline->Prepare(
      "INSERT INTO threads(gid, name, state, started_at_us) VALUES (?1, ?2, 1, ?3)",
      baseline->insert_thread_));
  TOCL_RETURN_IF_ERROR(
      baseline->Prepare("INSERT INTO attributes(entity, key, value, kind) VALUES (?1, ?2, ?3, 3)",
                        baseline->insert_attribute_));
  TOCL_RETURN_IF_ERROR(baseline->Prepare("INSERT INTO changes(gid, op, at_us) VALUES (?1, 1, ?2)",
                                         baseline->insert_change_));
  return baseline;
}

Status SqliteBaseline::Exec(const char* sql) {
  char* error = nullptr;
  int rc = sqlite3_exec(db_.get(), sql, nullptr, nullptr, &error);
  if (rc == SQLITE_OK) return Status::Ok();
  std::string message = error != nullptr ? error : sqlite3_errstr(rc);
  sqlite3_free(error);
  return Internal(fmt::format("baseline sqlite: {}", message));
}

Status SqliteBaseline::Prepare(const char* sql, StatementHandle& out) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_.get(), sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  out.reset(stmt);
  if (rc != SQLITE_OK) {
    return Internal(fmt::format("baseline sqlite prepare: {}", sqlite3_errmsg(db_.get())));
  }
  return Status::Ok();
}

Status SqliteBaseline::Run(sqlite3_stmt* stmt, const char* what) {
  int rc = sqlite3_step(stmt);
  sqlite3_reset(stmt);
  if (rc == SQLITE_DONE) return Status::Ok();
  return Internal(fmt::format("baseline sqlite insert {}: {}", what, sqlite3_errmsg(db_.get())));
}

Status SqliteBaseline::WriteBatch(std::span<const ThreadInfo> threads) {
  TOCL_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  int64_t now = NowMicros();
  for (const ThreadInfo& thread : threads) {
    sqlite3_stmt* insert = insert_thread_.get();
    sqlite3_bind_int64(insert, 1, directory::StoredGid(thread.gid));
    sqlite3_bind_text(insert, 2, thread.name.data(), static_cast<int>(thread.name.size()),
                      SQLITE_STATIC);
    sqlite3_bind_int64(insert, 3, now);
    Status status = Run(insert, "thread");
    for (const auto& [key, value] : thread.attributes) {
      if (!status.ok()) break;
      sqlite3_stmt* attribute = insert_attribute_.get();
      sqlite3_bind_int64(attribute, 1, directory::StoredGid(thread.gid));
      sqlite3_bind_text(attribute, 2, key.data(), static_cast<int>(key.size()), SQLITE_STATIC);
      sqlite3_bind_text(attribute, 3, value.data(), static_cast<int>(value.size()), SQLITE_STATIC);
      status = Run(attribute, "attribute");
    }
    if (status.ok()) {
      sqlite3_stmt* change = insert_change_.get();
      sqlite3_bind_int64(change, 1, directory::StoredGid(thread.gid));
      sqlite3_bind_int64(change, 2, now);
      status = Run(change, "change");
    }
    if (!status.ok()) {
      (void)Exec("ROLLBACK");
      return status;
    }
  }
  return Exec("COMMIT");
}

}  // namespace tocl::bench
