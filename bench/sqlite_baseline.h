// The reference for the daemon's registration rate: the same thread batches
// written with raw SQLite into a fresh file, with the durability the daemon
// promises (WAL, synchronous=FULL, one transaction and so one fsync per
// batch) and the rows the daemon writes per thread: a `threads` row, one
// `attributes` row per attribute and one `changes` row, with the same
// tables and indexes as the daemon's schema. What it leaves out is exactly
// the daemon's overhead: gRPC, protobuf, validation, the owner check, the
// writer queue and savepoints.
//
// Errors: Internal with SQLite's message. Threading: one thread at a time.
#pragma once

#include <sqlite3.h>

#include <memory>
#include <span>
#include <string>

#include "store/sqlite.h"
#include "tocl/entity.h"
#include "tocl/status.h"

namespace tocl::bench {

class SqliteBaseline {
 public:
  // Creates `path`, which must not exist yet.
  static Result<std::unique_ptr<SqliteBaseline>> Create(const std::string& path);

  // One transaction, committed (and fsynced) before this returns.
  Status WriteBatch(std::span<const ThreadInfo> threads);

  const std::string& path() const { return path_; }

 private:
  struct FinalizeStatement {
    void operator()(sqlite3_stmt* stmt) const { sqlite3_finalize(stmt); }
  };
  using StatementHandle = std::unique_ptr<sqlite3_stmt, FinalizeStatement>;

  explicit SqliteBaseline(std::string path) : path_(std::move(path)) {}
  Status Exec(const char* sql);
  Status Prepare(const char* sql, StatementHandle& out);
  Status Run(sqlite3_stmt* stmt, const char* what);

  std::string path_;
  // Declared in setup order: the statements are finalized before the
  // connection closes.
  directory::Database db_;
  StatementHandle insert_thread_;
  StatementHandle insert_attribute_;
  StatementHandle insert_change_;
};

}  // namespace tocl::bench
