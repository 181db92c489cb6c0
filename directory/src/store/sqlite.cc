#include "store/sqlite.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <mutex>

namespace tocl::directory {

Status SqliteStatus(sqlite3* db, int rc, std::string_view operation) {
  if (rc == SQLITE_OK || rc == SQLITE_DONE || rc == SQLITE_ROW) return Status::Ok();
  std::string message = fmt::format("{}: {} (sqlite {})", operation,
                                    db ? sqlite3_errmsg(db) : sqlite3_errstr(rc), rc);
  switch (rc & 0xff) {
    case SQLITE_FULL:
      return ResourceExhausted(std::move(message));
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return DataLoss(std::move(message));
    case SQLITE_CONSTRAINT:
      return AlreadyExists(std::move(message));
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Unavailable(std::move(message));
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_READONLY:
      return FailedPrecondition(std::move(message));
    default:
      return Internal(std::move(message));
  }
}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(stmt_);
    db_ = std::exchange(other.db_, nullptr);
    stmt_ = std::exchange(other.stmt_, nullptr);
  }
  return *this;
}

Statement::~Statement() {
  sqlite3_finalize(stmt_);
}

// Bind errors can only be programming errors (index out of range); they
// surface at Step() as SQLITE_RANGE/MISUSE, so the result is not checked here.
Statement& Statement::Bind(int index, int64_t value) {
  sqlite3_bind_int64(stmt_, index, value);
  return *this;
}

Statement& Statement::Bind(int index, std::string_view text) {
  sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  return *this;
}

Statement& Statement::BindBlob(int index, std::string_view bytes) {
  sqlite3_bind_blob64(stmt_, index, bytes.data(), bytes.size(), SQLITE_TRANSIENT);
  return *this;
}

Statement& Statement::BindNull(int index) {
  sqlite3_bind_null(stmt_, index);
  return *this;
}

Result<bool> Statement::Step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqliteStatus(db_, rc, "step");
}

Status Statement::Run() {
  for (;;) {
    TOCL_ASSIGN_OR_RETURN(bool row, Step());
    if (!row) return Status::Ok();
  }
}

void Statement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

std::string_view Statement::ColumnText(int column) const {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
  return text ? std::string_view(text, sqlite3_column_bytes(stmt_, column)) : std::string_view();
}

std::string_view Statement::ColumnBlob(int column) const {
  const auto* blob = static_cast<const char*>(sqlite3_column_blob(stmt_, column));
  return blob ? std::string_view(blob, sqlite3_column_bytes(stmt_, column)) : std::string_view();
}

Result<Database> Database::Open(const std::string& path, OpenMode mode) {
  // Memory statistics take a global mutex on every allocation; nobody reads
  // them. Only possible before SQLite initialises (else a harmless MISUSE).
  static std::once_flag configured;
  std::call_once(configured, [] { sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); });
  sqlite3* raw = nullptr;
  int flags = SQLITE_OPEN_NOMUTEX |
              (mode == OpenMode::kReadWrite ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
                                            : SQLITE_OPEN_READONLY);
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  Database db(raw);  // owns raw even on failure: sqlite3_open_v2 allocates it
  if (rc != SQLITE_OK) return SqliteStatus(raw, rc, fmt::format("open {}", path));
  sqlite3_extended_result_codes(raw, 1);
  return db;
}

Database& Database::operator=(Database&& other) noexcept {
  if (this != &other) {
    cache_.clear();
    sqlite3_close_v2(db_);
    db_ = std::exchange(other.db_, nullptr);
    cache_ = std::move(other.cache_);
  }
  return *this;
}

Database::~Database() {
  cache_.clear();  // statements first: a connection with open statements does not close
  sqlite3_close_v2(db_);
}

Status Database::Exec(std::string_view sql) {
  std::string text(sql);
  char* error = nullptr;
  int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &error);
  if (error) sqlite3_free(error);
  return SqliteStatus(db_, rc, fmt::format("exec '{:.60}'", sql));
}

Result<Statement> Database::Prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                              SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) return SqliteStatus(db_, rc, fmt::format("prepare '{:.60}'", sql));
  return Statement(db_, stmt);
}

Result<ScopedStatement> Database::Cached(std::string_view sql) {
  auto it = cache_.find(std::string(sql));
  if (it == cache_.end()) {
    TOCL_ASSIGN_OR_RETURN(Statement stmt, Prepare(sql));
    it = cache_.emplace(std::string(sql), std::make_unique<Statement>(std::move(stmt))).first;
  }
  it->second->Reset();
  return ScopedStatement(it->second.get());
}

Result<int64_t> Database::QueryInt(std::string_view sql) {
  TOCL_ASSIGN_OR_RETURN(Statement stmt, Prepare(sql));
  TOCL_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return NotFound(fmt::format("'{}' returned no row", sql));
  return stmt.ColumnInt(0);
}

Result<Transaction> Transaction::Begin(Database& db, std::string_view begin_sql) {
  TOCL_RETURN_IF_ERROR(db.Exec(begin_sql));
  return Transaction(&db);
}

Transaction::~Transaction() {
  if (db_ && !sqlite3_get_autocommit(db_->get())) {
    Status status = db_->Exec("ROLLBACK");
    if (!status.ok()) spdlog::error("rollback failed: {}", status.ToString());
  }
}

Status Transaction::Commit() {
  Database* db = std::exchange(db_, nullptr);
  Status status = db->Exec("COMMIT");
  if (!status.ok() && !sqlite3_get_autocommit(db->get())) {
    (void)db->Exec("ROLLBACK");
  }
  return status;
}

}  // namespace tocl::directory
