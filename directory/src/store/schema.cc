#include "store/schema.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <span>

namespace tocl::directory {
namespace {

struct Migration {
  int version;
  const char* sql;
};

// Append-only: a released migration is never edited, a new one is added.
constexpr Migration kMigrations[] = {
    {1, R"sql(
CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE hosts(
  gid INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  address TEXT NOT NULL DEFAULT '',
  state INTEGER NOT NULL,
  started_at_us INTEGER NOT NULL,
  exited_at_us INTEGER NOT NULL DEFAULT 0,
  exit_reason TEXT NOT NULL DEFAULT '');
CREATE TABLE processes(
  gid INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  os_pid INTEGER NOT NULL,
  state INTEGER NOT NULL,
  started_at_us INTEGER NOT NULL,
  exited_at_us INTEGER NOT NULL DEFAULT 0,
  exit_reason TEXT NOT NULL DEFAULT '',
  session_token BLOB);
CREATE TABLE threads(
  gid INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  state INTEGER NOT NULL,
  started_at_us INTEGER NOT NULL,
  exited_at_us INTEGER NOT NULL DEFAULT 0,
  exit_reason TEXT NOT NULL DEFAULT '');
CREATE TABLE attributes(
  entity INTEGER NOT NULL,
  key TEXT NOT NULL,
  value TEXT NOT NULL,
  kind INTEGER NOT NULL,
  PRIMARY KEY(entity, key)) WITHOUT ROWID;
CREATE INDEX attributes_by_value ON attributes(key, value, kind, entity);
CREATE TABLE endpoints(
  process INTEGER NOT NULL,
  subsystem TEXT NOT NULL,
  address BLOB NOT NULL,
  PRIMARY KEY(process, subsystem)) WITHOUT ROWID;
CREATE TABLE changes(
  seq INTEGER PRIMARY KEY,
  gid INTEGER NOT NULL,
  op INTEGER NOT NULL,
  at_us INTEGER NOT NULL);
CREATE INDEX processes_by_name ON processes(name);
CREATE INDEX processes_by_pid ON processes(os_pid);
CREATE INDEX threads_by_name ON threads(name);
)sql"},
    // Clusters (issue #5): replicated rows of other hosts, host reachability,
    // members, replication progress, spawned processes' exit status.
    {2, R"sql(
ALTER TABLE changes ADD COLUMN origin INTEGER NOT NULL DEFAULT 0;
ALTER TABLE hosts ADD COLUMN reachable INTEGER NOT NULL DEFAULT 1;
ALTER TABLE processes ADD COLUMN exit_status INTEGER;
ALTER TABLE processes ADD COLUMN exit_signal INTEGER;
ALTER TABLE processes ADD COLUMN parent INTEGER NOT NULL DEFAULT 0;
CREATE TABLE members(
  host INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  address TEXT NOT NULL,
  node_key TEXT NOT NULL DEFAULT '',
  joined_at_us INTEGER NOT NULL);
CREATE TABLE replicas(
  host INTEGER PRIMARY KEY,
  applied_seq INTEGER NOT NULL);
)sql"},
    // Retention (issue #16): exited entities are found by host and exit time
    // (partial indexes: running rows, the bulk, are not in them, so
    // registrations write no extra entry), and a replica remembers the
    // highest process index of each host it has seen, to tell a removed
    // process from one that never existed.
    {3, R"sql(
CREATE INDEX processes_exited ON processes((gid >> 48), exited_at_us) WHERE state = 2;
CREATE INDEX threads_exited ON threads((gid >> 48), exited_at_us) WHERE state = 2;
ALTER TABLE replicas ADD COLUMN max_process INTEGER NOT NULL DEFAULT 0;
)sql"},
};

Result<int> CurrentVersion(Database& db) {
  TOCL_RETURN_IF_ERROR(
      db.Exec("CREATE TABLE IF NOT EXISTS schema_version(version INTEGER NOT NULL)"));
  TOCL_ASSIGN_OR_RETURN(Statement stmt, db.Prepare("SELECT max(version) FROM schema_version"));
  TOCL_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row || stmt.ColumnIsNull(0)) return 0;
  return static_cast<int>(stmt.ColumnInt(0));
}

}  // namespace

int LatestSchemaVersion() {
  return std::span(kMigrations).back().version;
}

Status Migrate(Database& db) {
  TOCL_ASSIGN_OR_RETURN(int version, CurrentVersion(db));
  if (version > LatestSchemaVersion()) {
    return FailedPrecondition(
        fmt::format("database schema version {} is newer than this toclsd understands ({})",
                    version, LatestSchemaVersion()));
  }
  for (const Migration& migration : kMigrations) {
    if (migration.version <= version) continue;
    TOCL_ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(db, "BEGIN IMMEDIATE"));
    TOCL_RETURN_IF_ERROR(
        db.Exec(migration.sql).WithContext(fmt::format("schema migration {}", migration.version)));
    TOCL_ASSIGN_OR_RETURN(Statement insert,
                          db.Prepare("INSERT INTO schema_version(version) VALUES (?1)"));
    TOCL_RETURN_IF_ERROR(insert.Bind(1, int64_t{migration.version}).Run());
    TOCL_RETURN_IF_ERROR(txn.Commit());
    spdlog::info("directory schema migrated to version {}", migration.version);
  }
  return Status::Ok();
}

Status ConfigureConnection(Database& db, int64_t cache_kib) {
  // WAL lets readers run beside the single writer. synchronous=FULL fsyncs
  // the WAL at every commit, so an acknowledged write survives a crash of
  // the daemon and of the machine; group commit (writer.h) pays for it once
  // per batch of writes, not once per write.
  // The busy timeout first: even a connection that finds WAL already set
  // takes a lock to read the journal mode, and a reader opened while the
  // writer checkpoints would otherwise fail at once with "database is
  // locked" (seen with sixteen processes verifying their registrations).
  TOCL_RETURN_IF_ERROR(db.Exec("PRAGMA busy_timeout=10000"));
  TOCL_ASSIGN_OR_RETURN(Statement wal, db.Prepare("PRAGMA journal_mode=WAL"));
  TOCL_ASSIGN_OR_RETURN(bool row, wal.Step());
  if (!row || wal.ColumnText(0) != "wal") {
    return FailedPrecondition("the database refused WAL journal mode");
  }
  return db.Exec(
      fmt::format("PRAGMA synchronous=FULL; PRAGMA busy_timeout=10000; PRAGMA cache_size=-{};"
                  "PRAGMA temp_store=MEMORY; PRAGMA foreign_keys=OFF;",
                  cache_kib));
}

}  // namespace tocl::directory
