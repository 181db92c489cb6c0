#include "store/store.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <unordered_set>

#include "query/query_compiler.h"
#include "query/query_parser.h"
#include "store/limits.h"
#include "store/reader_pool.h"
#include "store/rows.h"
#include "store/schema.h"

namespace tocl::directory {
namespace {

// Host ids are assigned here until daemons join a cluster (a later issue):
// the first start records `wanted` (1 when not given), every later start
// keeps what is recorded and refuses a different `wanted`.
Result<Gid> AssignLocalHostId(Database& db, uint32_t wanted) {
  TOCL_ASSIGN_OR_RETURN(ScopedStatement read,
                        db.Cached("SELECT value FROM meta WHERE key='host_id'"));
  TOCL_ASSIGN_OR_RETURN(bool row, read->Step());
  if (row) {
    const int64_t recorded = read->ColumnInt(0);
    if (wanted != 0 && recorded != wanted) {
      // The caller names the file.
      return FailedPrecondition(fmt::format(
          "it belongs to host id {}, not {}; start with --host-id {} or use another state "
          "directory",
          recorded, wanted, recorded));
    }
    return Gid::Host(static_cast<uint32_t>(recorded));
  }
  const uint32_t id = wanted != 0 ? wanted : 1;
  TOCL_ASSIGN_OR_RETURN(ScopedStatement write,
                        db.Cached("INSERT INTO meta(key, value) VALUES ('host_id', ?1)"));
  TOCL_RETURN_IF_ERROR(write->Bind(1, int64_t{id}).Run());
  return Gid::Host(id);
}

// The caller must hold the token of a running process on this host.
// Replicated rows of other hosts' processes have no token (NULL, read as
// empty): an empty token never matches, and another host's process is
// refused before its row is read, so nobody writes on behalf of another
// host's processes through this daemon.
// Compares session tokens in time that does not depend on where they
// differ (a caller timing refusals learns nothing of the right token).
bool SameToken(std::string_view stored, std::string_view given) {
  if (stored.size() != given.size()) return false;
  unsigned char difference = 0;
  for (size_t i = 0; i < stored.size(); ++i) {
    difference |= static_cast<unsigned char>(stored[i] ^ given[i]);
  }
  return difference == 0;
}

Status CheckOwner(Database& db, Gid host, Gid process, std::string_view token) {
  if (process.host() != host) {
    return PermissionDenied(fmt::format(
        "process {} belongs to host {}; only its own daemon ({}) "
        "takes writes for it, this is {}",
        process.ToString(), process.host().ToString(), process.host().ToString(), host.ToString()));
  }
  if (token.empty()) {
    return PermissionDenied(fmt::format("no session token for process {}", process.ToString()));
  }
  TOCL_ASSIGN_OR_RETURN(
      ScopedStatement stmt,
      db.Cached("SELECT state, session_token, exit_reason FROM processes WHERE gid = ?1"));
  TOCL_ASSIGN_OR_RETURN(bool row, stmt->Bind(1, StoredGid(process)).Step());
  if (!row) return NotFound(fmt::format("no process {}", process.ToString()));
  if (!SameToken(stmt->ColumnBlob(1), token)) {
    return PermissionDenied(
        fmt::format("the session token does not belong to process {}", process.ToString()));
  }
  if (stmt->ColumnInt(0) != kStateRunning) {
    return FailedPrecondition(
        fmt::format("process {} has exited ({})", process.ToString(), stmt->ColumnText(2)));
  }
  return Status::Ok();
}

Status RegisterHost(Database& db, Gid host, const std::string& name,
                    const std::map<std::string, std::string>& attributes) {
  TOCL_ASSIGN_OR_RETURN(ScopedStatement read, db.Cached("SELECT name FROM hosts WHERE gid = ?1"));
  TOCL_ASSIGN_OR_RETURN(bool row, read->Bind(1, StoredGid(host)).Step());
  int64_t now = NowMicros();
  bool changed = !row || read->ColumnText(0) != name;
  if (changed) {
    TOCL_ASSIGN_OR_RETURN(
        ScopedStatement write,
        db.Cached("INSERT INTO hosts(gid, name, state, started_at_us) VALUES (?1, ?2, 1, ?3) "
                  "ON CONFLICT(gid) DO UPDATE SET name = excluded.name"));
    TOCL_RETURN_IF_ERROR(write->Bind(1, StoredGid(host)).Bind(2, name).Bind(3, now).Run());
  }
  for (const auto& [key, value] : attributes) {
    TOCL_ASSIGN_OR_RETURN(
        ScopedStatement set,
        db.Cached("INSERT INTO attributes(entity, key, value, kind) VALUES (?1, ?2, ?3, ?4) "
                  "ON CONFLICT(entity, key) DO UPDATE SET value = excluded.value "
                  "WHERE value != excluded.value"));
    TOCL_RETURN_IF_ERROR(
        set->Bind(1, StoredGid(host)).Bind(2, key).Bind(3, value).Bind(4, kKindHost).Run());
    if (sqlite3_changes(db.get()) > 0) changed = true;
  }
  if (!changed) return Status::Ok();
  return InsertChange(db, host, row ? kOpUpdated : kOpAdded, now);
}

// The host's attributes go through the same checks as a client's.
Status ValidateHostAttributes(const std::map<std::string, std::string>& attributes) {
  if (attributes.size() > kMaxAttributesPerEntity) {
    return InvalidArgument(
        fmt::format("{} host attributes (at most {})", attributes.size(), kMaxAttributesPerEntity));
  }
  for (const auto& [key, value] : attributes) {
    TOCL_RETURN_IF_ERROR(ValidateAttribute(key, value).WithContext("host attribute"));
  }
  return Status::Ok();
}

Result<int64_t> ParsePageToken(std::string_view token) {
  if (token.empty()) return std::numeric_limits<int64_t>::min();
  int64_t after = 0;
  auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), after);
  if (ec != std::errc() || end != token.data() + token.size()) {
    return InvalidArgument(fmt::format("bad page token '{}'", token));
  }
  return after;
}

}  // namespace

Store::Store(Gid host, std::string host_name, std::unique_ptr<ReaderPool> readers)
    : host_(host), host_name_(std::move(host_name)), readers_(std::move(readers)) {}

Store::~Store() {
  writer_.reset();  // drain writes before the readers and watchers go
}

Result<std::unique_ptr<Store>> Store::Open(const StoreOptions& options) {
  TOCL_RETURN_IF_ERROR(ValidateName("host", options.host_name));
  if (options.host_id > Gid::kMaxHost) {
    return InvalidArgument(
        fmt::format("host id {} is outside 1..{}", options.host_id, Gid::kMaxHost));
  }
  TOCL_RETURN_IF_ERROR(ValidateHostAttributes(options.host_attributes));
  TOCL_ASSIGN_OR_RETURN(Database db, Database::Open(options.path, OpenMode::kReadWrite));
  // The first statement that reads the file: a file that is not a database
  // fails here with a clear DataLoss error.
  TOCL_RETURN_IF_ERROR(ConfigureConnection(db, options.writer_cache_kib));
  TOCL_RETURN_IF_ERROR(Migrate(db));

  Gid host;
  {
    TOCL_ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(db, "BEGIN IMMEDIATE"));
    TOCL_ASSIGN_OR_RETURN(host, AssignLocalHostId(db, options.host_id));
    TOCL_RETURN_IF_ERROR(RegisterHost(db, host, options.host_name, options.host_attributes));
    TOCL_RETURN_IF_ERROR(txn.Commit());
  }
  TOCL_ASSIGN_OR_RETURN(int64_t head, db.QueryInt("SELECT coalesce(max(seq), 0) FROM changes"));

  auto readers = std::make_unique<ReaderPool>(options.path, options.cache_kib);
  std::unique_ptr<Store> store(new Store(host, options.host_name, std::move(readers)));
  store->head_seq_ = static_cast<uint64_t>(head);
  Store* raw = store.get();
  store->writer_ =
      std::make_unique<Writer>(std::move(db), [raw](Database& w) { raw->OnCommit(w); });
  return store;
}

void Store::OnCommit(Database& db) {
  // max(seq), not last_insert_rowid(): the latter may name a change that a
  // rolled-back savepoint wrote.
  Result<int64_t> head = db.QueryInt("SELECT coalesce(max(seq), 0) FROM changes");
  if (!head.ok()) {
    spdlog::error("reading the change-log head: {}", head.status().ToString());
    return;
  }
  {
    std::lock_guard lock(head_mu_);
    head_seq_ = std::max(head_seq_, static_cast<uint64_t>(*head));
  }
  head_changed_.notify_all();
}

uint64_t Store::head_seq() const {
  std::lock_guard lock(head_mu_);
  return head_seq_;
}

uint64_t Store::WaitForChange(uint64_t seq, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(head_mu_);
  uint64_t generation = wake_generation_;
  head_changed_.wait_until(lock, deadline,
                           [&] { return head_seq_ > seq || wake_generation_ != generation; });
  return head_seq_;
}

void Store::WakeWatchers() {
  {
    std::lock_guard lock(head_mu_);
    ++wake_generation_;
  }
  head_changed_.notify_all();
}

Result<Enrollment> Store::EnrollProcess(const pb::EnrollRegister& request) {
  TOCL_RETURN_IF_ERROR(ValidateName("process", request.name()));
  TOCL_RETURN_IF_ERROR(ValidateAttributes(request.attributes()));
  if (request.os_pid() <= 0) {
    return InvalidArgument(fmt::format("os_pid {} is not a process id", request.os_pid()));
  }
  Enrollment enrollment;
  enrollment.session_token = NewSessionToken();
  TOCL_RETURN_IF_ERROR(writer_->Run([&](Database& db) -> Status {
    TOCL_ASSIGN_OR_RETURN(Gid gid, AllocateProcessGid(db, host_));
    int64_t now = NowMicros();
    TOCL_ASSIGN_OR_RETURN(
        ScopedStatement insert,
        db.Cached("INSERT INTO processes(gid, name, os_pid, state, started_at_us, session_token) "
                  "VALUES (?1, ?2, ?3, 1, ?4, ?5)"));
    TOCL_RETURN_IF_ERROR(insert->Bind(1, StoredGid(gid))
                             .Bind(2, request.name())
                             .Bind(3, request.os_pid())
                             .Bind(4, now)
                             .BindBlob(5, enrollment.session_token)
                             .Run());
    TOCL_RETURN_IF_ERROR(InsertAttributes(db, gid, request.attributes()));
    TOCL_RETURN_IF_ERROR(InsertChange(db, gid, kOpAdded, now));
    enrollment.gid = gid;
    return Status::Ok();
  }));
  return enrollment;
}

Result<Enrollment> Store::ResumeProcess(Gid gid, std::string_view token, int64_t os_pid,
                                        const pb::EnrollRegister* own) {
  if (!gid.is_process()) {
    return InvalidArgument(fmt::format("resume id {} is not a process id", gid.ToString()));
  }
  if (gid.host() != host_) {
    return InvalidArgument(fmt::format("process {} does not belong to this host ({})",
                                       gid.ToString(), host_.ToString()));
  }
  uint64_t epoch = 0;
  TOCL_RETURN_IF_ERROR(writer_->Run([&](Database& db) -> Status {
    TOCL_RETURN_IF_ERROR(CheckOwner(db, host_, gid, token));
    int64_t recorded = 0;
    {
      TOCL_ASSIGN_OR_RETURN(ScopedStatement read,
                            db.Cached("SELECT os_pid FROM processes WHERE gid = ?1"));
      TOCL_ASSIGN_OR_RETURN(bool row, read->Bind(1, StoredGid(gid)).Step());
      if (row) recorded = read->ColumnInt(0);
    }
    bool updated = false;
    if (os_pid > 0 && recorded == 0) {
      // A process a daemon spawned (ReserveProcess), enrolling for the first
      // time: from now on its pid is known.
      TOCL_ASSIGN_OR_RETURN(ScopedStatement set,
                            db.Cached("UPDATE processes SET os_pid = ?2 WHERE gid = ?1"));
      TOCL_RETURN_IF_ERROR(set->Bind(1, StoredGid(gid)).Bind(2, os_pid).Run());
      updated = true;
    } else if (os_pid > 0 && recorded != os_pid) {
      // Programs started by a spawned process inherit its TOCL_PROCESS_GID
      // and TOCL_SPAWN_TOKEN; one of them must not take the process over.
      return PermissionDenied(
          fmt::format("process {} is os pid {}, not {}: its identity belongs to another process",
                      gid.ToString(), recorded, os_pid));
    }
    if (own != nullptr) {
      TOCL_ASSIGN_OR_RETURN(bool adopted, AdoptOwnIdentity(db, gid, *own));
      updated = updated || adopted;
    }
    if (updated) TOCL_RETURN_IF_ERROR(InsertChange(db, gid, kOpUpdated, NowMicros()));
    epoch = ++resumes_[gid];
    return Status::Ok();
  }));
  return Enrollment{gid, std::string(token), epoch};
}

Result<uint64_t> Store::RegisterThreads(const pb::RegisterThreadsRequest& request) {
  Gid process = Gid::FromRaw(request.process());
  if (!process.is_process()) {
    return InvalidArgument(fmt::format("{} is not a process id", process.ToString()));
  }
  if (static_cast<size_t>(request.threads_size()) > kMaxThreadsPerBatch) {
    return InvalidArgument(fmt::format("{} threads in one batch (at most {})",
                                       request.threads_size(), kMaxThreadsPerBatch));
  }
  std::unordered_set<uint64_t> seen;
  seen.reserve(request.threads_size());
  for (const pb::ThreadRegistration& thread : request.threads()) {
    Gid gid = Gid::FromRaw(thread.gid());
    if (!gid.is_thread()) {
      return InvalidArgument(fmt::format("{} is not a thread id", gid.ToString()));
    }
    if (gid.process() != process) {
      return PermissionDenied(fmt::format("thread {} does not belong to process {}", gid.ToString(),
                                          process.ToString()));
    }
    if (gid.thread_index() >= kFirstReservedThread) {
      return InvalidArgument(fmt::format(
          "thread {} is reserved: thread indexes {} to {} belong to the tocl runtime of each "
          "process and are never registered",
          gid.ToString(), kFirstReservedThread, Gid::kMaxThread));
    }
    if (!seen.insert(thread.gid()).second) {
      return InvalidArgument(fmt::format("thread {} appears twice in the batch", gid.ToString()));
    }
    TOCL_RETURN_IF_ERROR(ValidateName("thread", thread.name()).WithContext(gid.ToString()));
    TOCL_RETURN_IF_ERROR(ValidateAttributes(thread.attributes()).WithContext(gid.ToString()));
  }
  uint64_t seq = 0;
  TOCL_RETURN_IF_ERROR(writer_->Run([&](Database& db) -> Status {
    TOCL_RETURN_IF_ERROR(CheckOwner(db, host_, process, request.session_token()));
    // The statements are fetched once per batch: a thousand threads, three
    // statements each, is the writer's hottest loop.
    TOCL_ASSIGN_OR_RETURN(
        ScopedStatement insert,
        db.Cached("INSERT INTO threads(gid, name, state, started_at_us) VALUES (?1, ?2, 1, ?3)"));
    TOCL_ASSIGN_OR_RETURN(
        ScopedStatement attribute,
        db.Cached("INSERT INTO attributes(entity, key, value, kind) VALUES (?1, ?2, ?3, 3)"));
    TOCL_ASSIGN_OR_RETURN(ScopedStatement change,
                          db.Cached("INSERT INTO changes(gid, op, at_us) VALUES (?1, ?2, ?3)"));
    const int64_t now = NowMicros();
    for (const pb::ThreadRegistration& thread : request.threads()) {
      const int64_t stored = StoredGid(Gid::FromRaw(thread.gid()));
      insert->Reset();
      Status status = insert->Bind(1, stored).Bind(2, thread.name()).Bind(3, now).Run();
      if (status.code() == StatusCode::kAlreadyExists) {
        return AlreadyExists(
            fmt::format("thread {} is already registered", Gid::FromRaw(thread.gid()).ToString()));
      }
      TOCL_RETURN_IF_ERROR(status);
      for (const pb::Attribute& pair : thread.attributes()) {
        attribute->Reset();
        TOCL_RETURN_IF_ERROR(
            attribute->Bind(1, stored).Bind(2, pair.key()).Bind(3, pair.value()).Run());
      }
      change->Reset();
      TOCL_RETURN_IF_ERROR(change->Bind(1, stored).Bind(2, kOpAdded).Bind(3, now).Run());
    }
    // An empty batch changes nothing: answer with what is already there.
    seq = request.threads().empty() ? head_seq() : LastChangeSeq(db);
    return Status::Ok();
  }));
  return seq;
}

Result<uint64_t> Store::UnregisterThreads(const pb::UnregisterThreadsRequest& request) {
  Gid process = Gid::FromRaw(request.process());
  if (!process.is_process()) {
    return InvalidArgument(fmt::format("{} is not a process id", process.ToString()));
  }
  if (static_cast<size_t>(request.threads_size()) > kMaxThreadsPerBatch) {
    return InvalidArgument(fmt::format("{} threads in one batch (at most {})",
                                       request.threads_size(), kMaxThreadsPerBatch));
  }
  for (uint64_t raw : request.threads()) {
    Gid gid = Gid::FromRaw(raw);
    if (!gid.is_thread())
      return InvalidArgument(fmt::format("{} is not a thread id", gid.ToString()));
    if (gid.process() != process) {
      return PermissionDenied(fmt::format("thread {} does not belong to process {}", gid.ToString(),
                                          process.ToString()));
    }
  }
  std::string reason = request.reason().empty() ? "unregistered" : request.reason();
  TOCL_RETURN_IF_ERROR(ValidateName("exit reason", reason));
  uint64_t seq = 0;
  TOCL_RETURN_IF_ERROR(writer_->Run([&](Database& db) -> Status {
    TOCL_RETURN_IF_ERROR(CheckOwner(db, host_, process, request.session_token()));
    TOCL_ASSIGN_OR_RETURN(ScopedStatement mark,
                          db.Cached("UPDATE threads SET state = 2, exited_at_us = ?2, "
                                    "exit_reason = ?3 WHERE gid = ?1 AND state = 1"));
    int64_t now = NowMicros();
    for (uint64_t raw : request.threads()) {
      Gid gid = Gid::FromRaw(raw);
      mark->Reset();
      TOCL_RETURN_IF_ERROR(mark->Bind(1, StoredGid(gid)).Bind(2, now).Bind(3, reason).Run());
      if (sqlite3_changes(db.get()) == 0) {
        return NotFound(fmt::format("no running thread {}", gid.ToString()));
      }
      TOCL_RETURN_IF_ERROR(InsertChange(db, gid, kOpExited, now));
    }
    seq = request.threads().empty() ? head_seq() : LastChangeSeq(db);
    return Status::Ok();
  }));
  return seq;
}

Result<uint64_t> Store::PublishEndpoint(const pb::PublishEndpointRequest& request) {
  Gid process = Gid::FromRaw(request.process());
  if (!process.is_process()) {
    return InvalidArgument(fmt::format("{} is not a process id", process.ToString()));
  }
  TOCL_RETURN_IF_ERROR(ValidateEndpoint(request.endpoint()));
  uint64_t seq = 0;
  TOCL_RETURN_IF_ERROR(writer_->Run([&](Database& db) -> Status {
    TOCL_RETURN_IF_ERROR(CheckOwner(db, host_, process, request.session_token()));
    TOCL_ASSIGN_OR_RETURN(
        ScopedStatement upsert,
        db.Cached("INSERT INTO endpoints(process, subsystem, address) VALUES (?1, ?2, ?3) "
                  "ON CONFLICT(process, subsystem) DO UPDATE SET address = excluded.address"));
    TOCL_RETURN_IF_ERROR(upsert->Bind(1, StoredGid(process))
                             .Bind(2, request.endpoint().subsystem())
                             .BindBlob(3, request.endpoint().address())
                             .Run());
    TOCL_RETURN_IF_ERROR(InsertChange(db, process, kOpUpdated, NowMicros()));
    seq = LastChangeSeq(db);
    return Status::Ok();
  }));
  return seq;
}

Status Store::MarkStreamEnded(Gid process, uint64_t epoch, std::string_view reason) {
  return writer_->Run([&](Database& db) -> Status {
    auto resumed = resumes_.find(process);
    uint64_t current = resumed == resumes_.end() ? 0 : resumed->second;
    if (current != epoch) return Status::Ok();  // a newer stream owns the process
    return MarkExitedLocked(db, process, reason);
  });
}

Status Store::MarkProcessExited(Gid process, std::string_view reason, ExitStatus status) {
  return writer_->Run([&](Database& db) { return MarkExitedLocked(db, process, reason, status); });
}

Result<size_t> Store::ExpireUnresumed(const std::vector<Gid>& orphans, std::string_view reason) {
  size_t expired = 0;
  TOCL_RETURN_IF_ERROR(writer_->Run([&](Database& db) -> Status {
    for (Gid gid : orphans) {
      if (resumes_.contains(gid)) continue;
      TOCL_RETURN_IF_ERROR(MarkExitedLocked(db, gid, reason));
      ++expired;
    }
    return Status::Ok();
  }));
  return expired;
}

Result<pb::Entity> Store::Lookup(Gid gid) {
  if (!gid.valid()) return InvalidArgument(fmt::format("invalid id {}", gid.ToString()));
  TOCL_ASSIGN_OR_RETURN(ReaderPool::Lease lease, readers_->Acquire());
  // One snapshot for every read below: a replica commits a new process's
  // row with its host's highest process index, and read apart, a row that
  // arrived between the two reads would look removed (a tombstone for a
  // running process). Read-only: the destructor's rollback ends it.
  TOCL_ASSIGN_OR_RETURN(Transaction snapshot, Transaction::Begin(lease.db()));
  Result<pb::Entity> entity = LoadEntity(lease.db(), gid);
  if (entity.status().code() == StatusCode::kNotFound && !gid.is_host()) {
    Result<pb::Entity> removed = LookupMissing(lease.db(), gid);
    if (removed.status().code() != StatusCode::kNotFound) return removed;
  }
  if (entity.status().code() == StatusCode::kNotFound && gid.host() != host_) {
    Result<pb::Entity> host = LoadEntity(lease.db(), gid.host());
    if (host.status().code() == StatusCode::kNotFound) {
      return NotFound(fmt::format("no entity {}: host {} is not a member of this cluster",
                                  gid.ToString(), gid.host().ToString()));
    }
  }
  return entity;
}

Result<pb::QueryResponse> Store::Query(std::string_view expression, uint32_t limit,
                                       std::string_view page_token) {
  TOCL_ASSIGN_OR_RETURN(query::Expr expr, query::Parse(expression));
  TOCL_ASSIGN_OR_RETURN(std::vector<query::TableQuery> tables, query::Compile(expr));
  TOCL_ASSIGN_OR_RETURN(int64_t after, ParsePageToken(page_token));
  size_t wanted = limit == 0 ? kDefaultQueryResults : std::min<size_t>(limit, kMaxQueryResults);

  TOCL_ASSIGN_OR_RETURN(ReaderPool::Lease lease, readers_->Acquire());
  Database& db = lease.db();
  // One read transaction: every table and every entity from one snapshot.
  TOCL_ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(db));
  std::vector<int64_t> gids;
  for (const query::TableQuery& table : tables) {
    TOCL_ASSIGN_OR_RETURN(Statement stmt, db.Prepare(table.sql));
    stmt.Bind(1, after).Bind(2, static_cast<int64_t>(wanted + 1));
    for (size_t i = 0; i < table.params.size(); ++i) {
      int index = static_cast<int>(i) + 3;
      std::visit([&](const auto& value) { stmt.Bind(index, value); }, table.params[i]);
    }
    for (;;) {
      TOCL_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      gids.push_back(stmt.ColumnInt(0));
    }
  }
  std::sort(gids.begin(), gids.end());
  pb::QueryResponse response;
  if (gids.size() > wanted) {
    gids.resize(wanted);
    response.set_next_page_token(std::to_string(gids.back()));
  }
  // A page also ends at kMaxQueryReplyBytes: entities can carry up to 64 x
  // 4 KiB of attributes, and a reply must fit the clients' message limit.
  size_t bytes = 0;
  for (int64_t stored : gids) {
    TOCL_ASSIGN_OR_RETURN(pb::Entity entity, LoadEntity(db, GidFromStored(stored)));
    bytes += entity.ByteSizeLong();
    if (bytes > kMaxQueryReplyBytes && response.entities_size() > 0) {
      response.set_next_page_token(std::to_string(
          StoredGid(Gid::FromRaw(response.entities(response.entities_size() - 1).gid()))));
      break;
    }
    *response.add_entities() = std::move(entity);
  }
  TOCL_RETURN_IF_ERROR(txn.Commit());
  return response;
}

Result<std::vector<pb::ChangeEvent>> Store::ChangesSince(uint64_t since, size_t max,
                                                         uint32_t op_mask) {
  TOCL_ASSIGN_OR_RETURN(ReaderPool::Lease lease, readers_->Acquire());
  return ReadChanges(lease.db(), since, max, /*own_only=*/false, op_mask);
}

Result<std::vector<std::pair<Gid, int64_t>>> Store::RunningProcesses() {
  TOCL_ASSIGN_OR_RETURN(ReaderPool::Lease lease, readers_->Acquire());
  // This host's only: replicated rows of other hosts are theirs to expire.
  auto [low, high] = StoredRange(host_);
  TOCL_ASSIGN_OR_RETURN(
      ScopedStatement stmt,
      lease.db().Cached(
          "SELECT gid, os_pid FROM processes WHERE state = 1 AND gid BETWEEN ?1 AND ?2"));
  stmt->Bind(1, low).Bind(2, high);
  std::vector<std::pair<Gid, int64_t>> running;
  for (;;) {
    TOCL_ASSIGN_OR_RETURN(bool row, stmt->Step());
    if (!row) break;
    running.emplace_back(GidFromStored(stmt->ColumnInt(0)), stmt->ColumnInt(1));
  }
  stmt->Reset();
  return running;
}

}  // namespace tocl::directory
