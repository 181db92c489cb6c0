// A client of the local tocl daemon's directory.
//
// Finds entities by id (Lookup) or by attribute (Query), follows changes
// (Watch), reads the pool and network statistics processes reported
// (PoolStats, NetworkStats), spawns, signals and reads the logs of processes
// anywhere in the cluster (SpawnProcess, Kill, ReadLog) and enrolls the
// calling process (Enroll), which is what a tocl::Runtime does for you;
// tools and tests use this class directly.
//
//   auto client = tocl::DirectoryClient::Connect();  // $TOCL_DAEMON or the default socket
//   if (!client.ok()) { fmt::print("{}\n", client.status().ToString()); return 2; }
//   auto mergers = (*client)->Query("kind=thread and role=merger");
//
// Threading: all methods are safe to call from many threads at once.
// Errors: Unavailable when no daemon answers, and the daemon's own codes
// (NotFound, InvalidArgument with the position of a query error, ...).
#pragma once

#include <chrono>
#include <csignal>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "tocl/entity.h"
#include "tocl/export.h"
#include "tocl/gid.h"
#include "tocl/network_stats.h"
#include "tocl/pool_stats.h"
#include "tocl/spawn.h"
#include "tocl/status.h"

namespace tocl {

class ProcessSession;

struct QueryPage {
  std::vector<Entity> entities;  // in Gid order
  std::string next_page_token;   // empty when this was the last page
};

struct EnrollOptions {
  std::string name = {};
  Attributes attributes = {};
  // 0 = getpid(). The daemon refuses any pid but the enrolling process's
  // own on its unix socket (it asks the kernel); kept for TCP daemons.
  int64_t os_pid = 0;
};

struct ConnectOptions {
  std::string address = {};  // empty: DirectoryClient::DefaultAddress()
  std::chrono::milliseconds timeout = std::chrono::seconds(5);
  // For a TCP address: a host's credentials directory (`tocl keygen`;
  // ca.pem, cert.pem, key.pem), and the connection is mutual TLS, as a
  // daemon with credentials requires. Empty: $TOCL_CREDENTIALS when set,
  // else plaintext (a daemon without credentials listens on loopback
  // only). Unix sockets never use TLS (file permissions guard them).
  std::string credentials_dir = {};
};

class TOCL_EXPORT DirectoryClient {
 public:
  // The address tools and processes use when none is given: $TOCL_DAEMON if
  // set, else "unix:/var/lib/tocl/toclsd.sock" (toclsd's default socket).
  static std::string DefaultAddress();

  // Connects to "unix:/path", "unix:///abs/path" or "host:port", waiting up
  // to `timeout` for the daemon to answer. Unavailable if it does not; for
  // TCP, at once when the TLS handshake fails (a daemon with credentials
  // and a client without, or of another cluster), saying so. Credentials
  // that cannot be loaded are an error naming the file. The first form
  // takes credentials from $TOCL_CREDENTIALS.
  static Result<std::unique_ptr<DirectoryClient>> Connect(
      std::string address = DefaultAddress(),
      std::chrono::milliseconds timeout = std::chrono::seconds(5));
  static Result<std::unique_ptr<DirectoryClient>> Connect(const ConnectOptions& options);

  ~DirectoryClient();
  DirectoryClient(const DirectoryClient&) = delete;
  DirectoryClient& operator=(const DirectoryClient&) = delete;

  const std::string& address() const;

  // An empty round trip; returns the daemon's newest change sequence number.
  Result<uint64_t> Ping();

  // The standard gRPC health check: ok when the daemon is serving.
  Status CheckHealth();

  Result<Entity> Lookup(Gid gid);

  // One page of entities matching `expression` (see the README's query
  // language). limit 0 means the daemon's default (100).
  Result<QueryPage> Query(std::string_view expression, uint32_t limit = 0,
                          std::string_view page_token = {});
  // Every match, following pages; stops with ResourceExhausted past max_results.
  Result<std::vector<Entity>> QueryAll(std::string_view expression, size_t max_results = 1'000'000);

  // Streams change events with seq > since_seq to `on_event` until it returns
  // false, `stop` (when given) becomes true, or the stream fails. Blocks the
  // calling thread. Returns ok when stopped by the callback or `stop`.
  // `ops`: only events with these operations (empty: all of them).
  Status Watch(uint64_t since_seq, const std::function<bool(const ChangeEvent&)>& on_event,
               const std::function<bool()>& stop = {}, const std::vector<ChangeOp>& ops = {});
  // The same, ending at `deadline` (DeadlineExceeded) or when `stop` is
  // requested (Cancelled), at that moment: the call carries the deadline
  // and is cancelled by the request, where Watch's `stop` is polled.
  Status WatchUntil(uint64_t since_seq, std::chrono::system_clock::time_point deadline,
                    const std::function<bool(const ChangeEvent&)>& on_event,
                    const std::vector<ChangeOp>& ops = {}, std::stop_token stop = {});

  // The latest pool statistics reported to this daemon (ReportPoolStats):
  // of `process`, or of every process that has reported when it is null
  // (in Gid order; possibly none). For one process, NotFound when it is
  // unknown, has exited or has not reported on its current session yet (the
  // message says which); InvalidArgument when it is not a process id.
  Result<std::vector<ProcessPoolStats>> PoolStats(Gid process = Gid());

  // The latest network statistics reported to this daemon
  // (ReportNetworkStats), with the same rules as PoolStats: of `process`, or
  // of every process that has reported when it is null; NotFound for one
  // process that is unknown, has exited or has not reported yet.
  Result<std::vector<ProcessNetworkStats>> NetworkStats(Gid process = Gid());

  // Spawns a process (see SpawnOptions) on the host placement chooses and
  // returns once it has enrolled: it can be sent to at once. Waits up to the
  // enroll timeout plus a margin. Errors: InvalidArgument (no executable,
  // both host and where, a bad env entry, name or attribute), NotFound (no
  // such executable), Unavailable (the chosen host is down, no host matches
  // `where`), DeadlineExceeded (it did not enroll in time: it was killed),
  // FailedPrecondition (it exited before enrolling: the message has its exit
  // status), PermissionDenied (the daemon does not take spawns from here).
  Result<SpawnedProcess> SpawnProcess(const SpawnOptions& options);

  // Sends `signal` to a process of any host of the cluster. InvalidArgument
  // when `process` is not a process id or the signal is not 1..64; NotFound
  // for an unknown process; FailedPrecondition when it has exited.
  Status Kill(Gid process, int signal = SIGTERM);

  // Up to `max_bytes` (0: 1 MiB, at most 4 MiB) of a spawned process's
  // stdout or stderr from `offset`, wherever it runs; `size` says how much
  // there is so far. NotFound for a process no daemon of the cluster spawned.
  Result<LogChunk> ReadLog(Gid process, LogStream stream, uint64_t offset = 0,
                           uint32_t max_bytes = 0);

  // Enrolls the calling process: holds a stream to the daemon for the
  // session's life. The daemon marks the process exited when the stream
  // breaks; if the daemon restarts, the session re-enrolls with the same Gid.
  Result<std::unique_ptr<ProcessSession>> Enroll(const EnrollOptions& options);

  struct TOCL_NO_EXPORT Impl;  // the library's insides: not exported

 private:
  explicit DirectoryClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The enrollment of one process. Destroying it leaves cleanly (Close()).
// Threading: every method but the destructor may be called from many threads
// at once.
class TOCL_EXPORT ProcessSession {
 public:
  ~ProcessSession();
  ProcessSession(const ProcessSession&) = delete;
  ProcessSession& operator=(const ProcessSession&) = delete;

  Gid gid() const;
  Gid host() const { return gid().host(); }
  std::string host_name() const;
  // The cluster's data-plane secret the daemon gave at enrollment: 32 raw
  // bytes, or empty when the daemon runs without credentials (then the
  // process's networks stay on loopback). The runtime authenticates its
  // connections with it; applications have no use for it.
  std::string data_plane_secret() const;

  // Records threads the process numbered itself (gids under gid()). Durable
  // when this returns ok. Unavailable while re-enrolling after a daemon restart.
  Status RegisterThreads(std::span<const ThreadInfo> threads);
  Status UnregisterThreads(std::span<const Gid> threads, std::string_view reason = {});
  Status PublishEndpoint(std::string_view subsystem, std::string_view address);

  // Sends the process's pool statistics now (one message on the enroll
  // stream; the daemon keeps the latest until the session ends). Meant to be
  // called every few seconds. Returns once the message is handed to gRPC, not
  // when the daemon has it. InvalidArgument over kMaxPoolClassesPerReport
  // classes or a network name not 1..kMaxPoolNetworkBytes bytes;
  // Unavailable while re-enrolling after a daemon restart (report again
  // later); FailedPrecondition after Close().
  Status ReportPoolStats(std::span<const PoolClassStats> classes);

  // Sends the process's network statistics now, like ReportPoolStats (the
  // daemon keeps the latest until the session ends). Peers past
  // kMaxNetworkPeersPerReport and VIs past kMaxVisPerReport in a network
  // are left out. InvalidArgument over kMaxNetworksPerReport networks, for
  // a name or kind not 1..kMaxNetworkNameBytes bytes, a name twice, a
  // device over kMaxNetworkDeviceBytes, an address over
  // kMaxNetworkAddressBytes, a peer that is not a process id or a bandwidth
  // that is negative or not finite, a provider over 32 bytes, a VI whose
  // peer is not a process id, whose class is not a power of two from 256 B
  // to 1 MiB or whose state is not 1..kMaxViStateBytes bytes; Unavailable
  // while re-enrolling; FailedPrecondition after Close().
  Status ReportNetworkStats(std::span<const tocl::NetworkStats> networks);

  // Number of times the session re-enrolled after losing its daemon.
  uint64_t reenroll_count() const;

  // Says goodbye and ends the stream; the daemon marks the process exited
  // with `reason`. Idempotent.
  Status Close(std::string_view reason = "exited normally");

  struct TOCL_NO_EXPORT Impl;  // the library's insides: not exported
  explicit ProcessSession(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tocl
