// The directory store: the SQLite database of one daemon's hosts,
// processes, threads, attributes, endpoints and change log.
//
// Writes go through one Writer (group commit) and are durable when they
// return ok. Reads use a pool of read connections beside the writer (WAL), so
// lookups and queries never wait for a commit's fsync.
//
// Thread-safe: every method may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "store/rows.h"
#include "store/sqlite.h"
#include "store/writer.h"
#include "tocl/directory/v1/directory.pb.h"
#include "tocl/gid.h"

namespace tocl::directory {

namespace pb = ::tocl::directory::v1;

struct StoreOptions {
  std::string path;          // the database file
  std::string host_name;     // this host's name
  int64_t cache_kib = 8192;  // SQLite page cache per read connection
  // The writer's page cache: large, so that index pages stay in memory
  // while a million threads are registered.
  int64_t writer_cache_kib = 65536;
  // This host's id (1..65535). 0: the id recorded in the database, or 1 for
  // a new one. A database that recorded another id is not opened
  // (FailedPrecondition naming both): a store never renumbers its host.
  uint32_t host_id = 0;
  // Attributes of this host's entity, set (added or replaced) at every open,
  // e.g. {"networks", "shm,tcp:eth0"}. Attributes not named here are kept.
  std::map<std::string, std::string> host_attributes = {};
};

// A daemon of the cluster as the membership tables know it.
struct MemberRow {
  Gid host;
  std::string name;
  std::string address;  // its gRPC TCP address
};

struct Enrollment {
  Gid gid;
  std::string session_token;
  // How many times the process had re-enrolled, this one included (0 for a
  // new process): the stream that ends passes it back to MarkStreamEnded.
  uint64_t epoch = 0;

  bool resumed() const { return epoch > 0; }
};

// What one Store::RemoveExited call removed.
struct Removal {
  std::vector<Gid> processes;  // removed with their threads
  uint64_t threads = 0;        // threads removed, with their process or on their own
  bool more = false;           // it stopped at its bound: call again
};

class ReaderPool;

class Store {
 public:
  // Opens or creates the database, migrates it, registers this host.
  static Result<std::unique_ptr<Store>> Open(const StoreOptions& options);
  ~Store();

  Gid host() const { return host_; }
  const std::string& host_name() const { return host_name_; }

  // --- Writes: durable when they return ok; the result is the change-log
  // sequence number of the last change they made. --------------------------

  Result<Enrollment> EnrollProcess(const pb::EnrollRegister& request);
  // Re-enrolls a process that was running when the daemon restarted, or
  // enrolls a spawned one (ReserveProcess) for the first time: then its os
  // pid is recorded (an UPDATED change). PermissionDenied when the row has
  // another os pid. os_pid 0: not checked. `own`: the name and attributes
  // the process enrolls with (its Runtime::Start options), kept by the
  // rule of AdoptOwnIdentity (an UPDATED change when they add anything).
  Result<Enrollment> ResumeProcess(Gid gid, std::string_view token, int64_t os_pid = 0,
                                   const pb::EnrollRegister* own = nullptr);
  Result<uint64_t> RegisterThreads(const pb::RegisterThreadsRequest& request);
  Result<uint64_t> UnregisterThreads(const pb::UnregisterThreadsRequest& request);
  Result<uint64_t> PublishEndpoint(const pb::PublishEndpointRequest& request);
  // Marks a running process and its running threads exited. Ok (and no
  // change) if it had already exited.
  Status MarkProcessExited(Gid process, std::string_view reason, ExitStatus status = {});
  // The enroll stream of `epoch` ended: marks the process exited unless it
  // re-enrolled since on another stream (decided on the writer thread, so a
  // resume and the old stream's end cannot interleave).
  Status MarkStreamEnded(Gid process, uint64_t epoch, std::string_view reason);
  // Marks exited those of `orphans` (processes running before a daemon
  // restart) that have not re-enrolled since; returns how many. Runs on the
  // writer thread like ResumeProcess, so a process either re-enrolled first
  // or is told it was expired.
  Result<size_t> ExpireUnresumed(const std::vector<Gid>& orphans, std::string_view reason);

  // --- Reads ---------------------------------------------------------------

  // The entity; for a process that was removed (RemoveExited, or its
  // owner's REMOVED change), and for the threads of one, a tombstone
  // (Entity.removed, state EXITED). NotFound for ids that never existed (and
  // threads removed while their process runs: thread ids are the process's
  // own choice, so their absence proves nothing).
  Result<pb::Entity> Lookup(Gid gid);
  Result<pb::QueryResponse> Query(std::string_view expression, uint32_t limit,
                                  std::string_view page_token);
  // Up to `max` events with seq > since, oldest first.
  // `op_mask`: only these operations (bit 1 << op each); 0 = all.
  Result<std::vector<pb::ChangeEvent>> ChangesSince(uint64_t since, size_t max,
                                                    uint32_t op_mask = 0);
  // This host's processes recorded as running, with their OS pids.
  Result<std::vector<std::pair<Gid, int64_t>>> RunningProcesses();

  // --- Cluster: membership, replication, reachability (store_cluster.cc) ----

  // Seed only: the host id of the daemon with `node_key` (the one it was
  // given before, else `wanted` when free, else the lowest free id), recorded
  // durably in `members` with its name and address. AlreadyExists when
  // `wanted` belongs to another node key.
  Result<Gid> AssignMember(std::string_view node_key, std::string_view name,
                           std::string_view address, Gid wanted);
  // Every member recorded here (this host included), in host order.
  Result<std::vector<MemberRow>> Members();
  // Records members learned from the seed or from gossip (name, address),
  // and gives each a host row (the replica's, until its own rows arrive).
  // This host's own entry is ignored.
  Status SaveMembers(std::span<const MemberRow> members);

  // This host's own changes with seq > since (what replicas pull), oldest
  // first, at most `max`, each with the entity as it is now.
  Result<std::vector<pb::ChangeEvent>> OwnChangesSince(uint64_t since, size_t max);
  // A page of this host's own entities (host, processes, threads) with
  // gid > after, in gid order: what a snapshot sends.
  Result<std::vector<pb::Entity>> OwnEntitiesAfter(Gid after, size_t max);
  // The newest change of `origin` applied here (0: none).
  Result<uint64_t> ReplicaProgress(Gid origin);
  // Applies `origin`'s changes (entities replace the rows they name; a gid
  // not under `origin` is refused: InvalidArgument, nothing applied) and
  // records `applied_seq`, in one transaction. Each change is appended to
  // the local log with origin = its host, so local watchers see it.
  Status ApplyReplicated(Gid origin, std::span<const pb::ChangeEvent> events, uint64_t applied_seq);
  // A snapshot of `origin`: Begin, Apply* (pages of ADDED events), Finish
  // (rows of `origin` the snapshot did not name are deleted, progress set).
  Status BeginSnapshot(Gid origin);
  Status ApplySnapshot(Gid origin, std::span<const pb::ChangeEvent> events);
  Status FinishSnapshot(Gid origin, uint64_t applied_seq);
  // Marks `host` down or back (a kOpUnreachable / kOpReachable change when it
  // changes). Its running entities read as UNREACHABLE while it is down.
  Status SetReachable(Gid host, bool reachable);
  // The host id a database file recorded, before opening it (0: no file,
  // or none recorded yet): a daemon joining a cluster asks the seed for it.
  static Result<uint32_t> RecordedHostId(const std::string& path);
  // This daemon's cluster address, published in its host row (an UPDATED
  // change when it changes, replicated like every own change).
  Status SetOwnAddress(std::string_view address);
  // Deletes the oldest changes so that about `keep` remain (at most
  // 100,000 per call, so the writer is never held long); returns how many
  // went. A replica whose progress is older than TrimmedThrough() gets a
  // snapshot instead of the changes.
  Result<uint64_t> TrimChangeLog(uint64_t keep);
  Result<uint64_t> TrimmedThrough();

  // --- Retention (store_retention.cc) ---------------------------------------

  // Removes this host's entities that exited before `cutoff_us` (Unix time,
  // microseconds), oldest exit first: processes with their threads,
  // attributes and endpoints, then threads that exited on their own (their
  // process runs, or exited later). One writer operation touching at most
  // about `max_entities` entities, so a backlog never holds the writer long;
  // `more` says to call again. Each removed process, and each thread removed
  // on its own, gets a REMOVED change (a process's covers its threads).
  // Process ids are not reused: the counter is kept, not the rows. Rows of
  // other hosts are never touched: they follow their owner's REMOVED changes.
  Result<Removal> RemoveExited(int64_t cutoff_us, size_t max_entities);
  // Whether RemoveExited(cutoff_us, ...) would remove anything now: an index
  // probe on a read connection (an idle daemon costs no writer operation).
  Result<bool> HasExitedBefore(int64_t cutoff_us);

  // --- Spawn (store_spawn.cc) -------------------------------------------------

  // The row of a process this daemon is about to spawn: a new id and a
  // session token the child enrolls with (as a resume), state running, os
  // pid 0 until it enrolls. `name_given`: the spawn named it; otherwise
  // `name` is a default (the executable's file name) that the child's own
  // name replaces when it enrolls.
  Result<Enrollment> ReserveProcess(
      std::string_view name, bool name_given,
      const google::protobuf::RepeatedPtrField<pb::Attribute>& attributes, Gid parent);
  // Records the OS pid of a process this daemon just started, while it
  // loads: its enrollment then finds it recorded and writes nothing (one
  // fsync fewer on the way from spawn to enrolled).
  Status RecordSpawnedPid(Gid process, int64_t os_pid);
  // Sets the exit status of a process that has already been marked exited
  // (its enroll stream ended before it was reaped): an UPDATED change.
  Status RecordExitStatus(Gid process, ExitStatus status);
  // Running processes of `host` (the replica's view for other hosts).
  Result<uint64_t> RunningProcessCount(Gid host);

  // The newest change-log sequence number.
  uint64_t head_seq() const;
  // Waits until head_seq() > seq or the deadline passes; returns head_seq().
  uint64_t WaitForChange(uint64_t seq, std::chrono::steady_clock::time_point deadline);
  // Wakes every WaitForChange (used at shutdown).
  void WakeWatchers();

 private:
  Store(Gid host, std::string host_name, std::unique_ptr<ReaderPool> readers);
  void OnCommit(Database& db);
  // Lookup's answer for an id `db` has no row for: a tombstone when the
  // process (or a thread's process) existed and was removed, else NotFound.
  Result<pb::Entity> LookupMissing(Database& db, Gid gid);

  const Gid host_;
  const std::string host_name_;
  std::unique_ptr<ReaderPool> readers_;

  mutable std::mutex head_mu_;
  std::condition_variable head_changed_;
  uint64_t head_seq_ = 0;         // guarded by head_mu_
  uint64_t wake_generation_ = 0;  // guarded by head_mu_

  // Re-enrolls per process since this start, until the process is removed
  // (RemoveExited); used only inside writer operations (serialised).
  std::map<Gid, uint64_t> resumes_;
  // Snapshots being applied: per origin host, the last gid a page named
  // (null before the first page); used only inside writer operations.
  std::map<Gid, Gid> snapshot_cursor_;
  // Spawned processes whose name is a default (the spawn gave none), until
  // they enroll or are removed; used only inside writer operations. Lost
  // with a restart: a child that enrolls after one keeps the default.
  std::set<Gid> default_named_;

  // What a resuming process says of itself, added to its row: the rule of
  // spawned processes (the spawn's name and values win, the process's own
  // fill in), which leaves the row of a process that re-enrolls as it was.
  // Whether the row changed. Inside a writer operation.
  Result<bool> AdoptOwnIdentity(Database& db, Gid gid, const pb::EnrollRegister& own);

  std::unique_ptr<Writer> writer_;  // last: its thread calls OnCommit
};

}  // namespace tocl::directory
