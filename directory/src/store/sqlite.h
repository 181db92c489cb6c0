// Move-only RAII handles over the SQLite C API, and the one place that turns
// SQLite result codes into tocl::Status (with the operation's name).
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "tocl/status.h"

namespace tocl::directory {

// Maps a SQLite result code to a Status: SQLITE_FULL -> ResourceExhausted,
// SQLITE_CORRUPT/NOTADB -> DataLoss, SQLITE_CONSTRAINT -> AlreadyExists,
// BUSY/LOCKED -> Unavailable, anything else -> Internal.
Status SqliteStatus(sqlite3* db, int rc, std::string_view operation);

class Statement {
 public:
  Statement() = default;
  Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  Statement(Statement&& other) noexcept { *this = std::move(other); }
  Statement& operator=(Statement&& other) noexcept;
  ~Statement();

  Statement& Bind(int index, int64_t value);
  Statement& Bind(int index, std::string_view text);
  Statement& BindBlob(int index, std::string_view bytes);
  Statement& BindNull(int index);

  // Advances to the next row: true if there is one, false when done.
  Result<bool> Step();
  // Runs a statement that returns no rows to completion.
  Status Run();
  // Resets and clears bindings so the statement can be reused.
  void Reset();

  int64_t ColumnInt(int column) const { return sqlite3_column_int64(stmt_, column); }
  std::string_view ColumnText(int column) const;
  std::string_view ColumnBlob(int column) const;
  bool ColumnIsNull(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }

 private:
  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
};

// A cached statement in use. Resets the statement when it goes out of
// scope: a statement left on a row would keep its read snapshot open.
class ScopedStatement {
 public:
  ScopedStatement() = default;
  explicit ScopedStatement(Statement* stmt) : stmt_(stmt) {}
  ScopedStatement(ScopedStatement&& other) noexcept : stmt_(std::exchange(other.stmt_, nullptr)) {}
  ScopedStatement& operator=(ScopedStatement&& other) noexcept {
    if (this != &other) {
      if (stmt_) stmt_->Reset();
      stmt_ = std::exchange(other.stmt_, nullptr);
    }
    return *this;
  }
  ~ScopedStatement() {
    if (stmt_) stmt_->Reset();
  }
  Statement* operator->() const { return stmt_; }
  Statement& operator*() const { return *stmt_; }

 private:
  Statement* stmt_ = nullptr;
};

enum class OpenMode { kReadWrite, kReadOnly };

class Database {
 public:
  // Opens (creating it in kReadWrite mode) the database at `path`.
  static Result<Database> Open(const std::string& path, OpenMode mode);

  Database() = default;
  Database(Database&& other) noexcept { *this = std::move(other); }
  Database& operator=(Database&& other) noexcept;
  ~Database();

  sqlite3* get() const { return db_; }

  // Runs one or more statements that return no rows.
  Status Exec(std::string_view sql);
  Result<Statement> Prepare(std::string_view sql);
  // A prepared statement kept for the life of the connection, reset for use
  // and again when the returned handle goes out of scope.
  Result<ScopedStatement> Cached(std::string_view sql);
  // The first column of the first row as an integer (e.g. a PRAGMA's value).
  Result<int64_t> QueryInt(std::string_view sql);

 private:
  explicit Database(sqlite3* db) : db_(db) {}
  sqlite3* db_ = nullptr;
  std::unordered_map<std::string, std::unique_ptr<Statement>> cache_;
};

// BEGIN ... COMMIT with ROLLBACK on every path that does not commit.
class Transaction {
 public:
  static Result<Transaction> Begin(Database& db, std::string_view begin_sql = "BEGIN");
  Transaction(Transaction&& other) noexcept : db_(std::exchange(other.db_, nullptr)) {}
  Transaction& operator=(Transaction&&) = delete;
  ~Transaction();
  Status Commit();

 private:
  explicit Transaction(Database* db) : db_(db) {}
  Database* db_ = nullptr;
};

}  // namespace tocl::directory
