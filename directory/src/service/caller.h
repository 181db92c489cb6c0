// Who made a call, as the kernel or a certificate says, never as the
// request says; and what such a caller may do to this host's processes.
//
// How a call is traced to its caller:
//  - The unix socket. toclsd accepts its connections itself and hands each
//    to gRPC (grpc::AddInsecureChannelFromFd, toclsd/unix_listener.h),
//    whose peer for such a connection is "fd:N", N the connection's
//    descriptor in this process. SO_PEERCRED on N gives the pid, uid and
//    gid of the process that connected, as the kernel recorded them at
//    connect(2). This is sound because gRPC closes N only when the
//    connection's transport is destroyed, after the last call on it: while
//    a handler runs, N is its connection and no other, even if the client
//    has gone (tests/integration/unix_peer_test.cc holds gRPC to this).
//    Why not simpler: with gRPC's own unix listener every caller's peer is
//    "unix:", and gRPC 1.51 has no per-call accessor for the peer's
//    credentials (neither ServerContext nor AuthContext; its local
//    credentials name no user).
//  - TCP with credentials (mutual TLS): the peer showed a certificate of the
//    cluster's CA: another daemon, or a tool holding a host's credentials
//    (an administrator's power). A daemon forwarding a call adds the uid of
//    its own verified caller (kCallerUidKey) and whether that caller is an
//    administrator there; the certificate is why it is believed.
//  - TCP without credentials (loopback only): the kernel's socket table
//    names the owner of the peer's end of the connection (loopback_peer.h).
//    Only toclsd's own user and root are served there (any local user can
//    open a loopback TCP connection, passing the unix socket's permissions
//    by); their forwarded uids are believed as over mutual TLS. Every
//    process of toclsd's user is trusted so, as it could equally read the
//    daemon's state directory: on a daemon that is not root this includes
//    every program it spawns (README "Security").
//
// A cluster is taken to share one uid space (uid 1000 is the same person on
// every host), as clusters with shared accounts (LDAP, NFS) do.
#pragma once

#include <grpcpp/client_context.h>
#include <grpcpp/server_context.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "service/loopback_peer.h"
#include "service/process_handle.h"
#include "tocl/gid.h"
#include "tocl/status.h"

namespace tocl::directory {

// Metadata of a forwarded call: the uid of the caller the forwarding daemon
// verified, and "1" when that caller is an administrator there.
inline constexpr const char* kCallerUidKey = "tocl-caller-uid";
inline constexpr const char* kCallerAdminKey = "tocl-caller-admin";

struct Caller {
  enum class Channel {
    kUnixSocket,   // this host's unix socket: SO_PEERCRED
    kLoopbackTcp,  // plaintext TCP from toclsd's user or root on this host
    kCertificate,  // mutual TLS, not forwarded: holds a host's credentials
    kForwarded,    // another daemon, for the caller it verified
  };
  Channel channel = Channel::kUnixSocket;
  pid_t pid = 0;  // kUnixSocket: the process that connected
  uid_t uid = 0;  // kCertificate: 0
  gid_t gid = 0;  // kUnixSocket only
  // May act on every process of this host: root, a member of admin_group,
  // a holder of a host certificate.
  bool admin = false;
  std::string peer = {};          // TCP: gRPC's peer address
  std::string forwarded_by = {};  // kForwarded: the forwarding daemon's mark ("h1"), printable

  // "uid 1000 (pid 4711) on the unix socket", for logs and errors.
  std::string Describe() const;
};

// The kernel's credentials of the process that connected to a unix socket.
struct UnixPeer {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// N of a call on a unix connection toclsd accepted (peer "fd:N"); nullopt
// for any other call.
std::optional<int> UnixConnectionFd(const grpc::ServerContext& context);
// SO_PEERCRED of connection `fd`.
Result<UnixPeer> UnixPeerOf(int fd);
// The process that connected to `fd`, held by a pidfd.
//  - SO_PEERPIDFD where the kernel has it (Linux 6.5): the very process
//    the kernel recorded at connect(2), no window. Any error but "no such
//    option" refuses: the process has exited (EINVAL, ESRCH), or the daemon
//    has no descriptor left (ResourceExhausted).
//  - Else (ENOPROTOOPT: Debian 12's 6.1) pidfd_open(peer.pid), checked by
//    PinProcessStartedBy against `accepted_ns`, when toclsd accepted the
//    connection (AcceptTimes); refused without it.
// PermissionDenied when the pid has gone to a process that started after
// the connection was accepted; NotFound/FailedPrecondition when the
// process is gone.
Result<ProcessHandle> PeerProcess(int fd, const UnixPeer& peer, std::optional<int64_t> accepted_ns);
// pidfd_open(pid), kept only if that process started no later than
// `accepted_ns` (BootTimeNs, accept_times.h): one that started after the
// connection was accepted got the pid after the process that connected
// exited. Its start time is read after pidfd_open and the pidfd then
// checked alive, so it is the pinned process's. Left open: a pid that
// went to another process before the accept, or within the clock tick
// (10 ms) of the accept: the connecting process must exit and its pid be
// reused in that time. Linux 6.5's SO_PEERPIDFD closes it.
Result<ProcessHandle> PinProcessStartedBy(pid_t pid, int64_t accepted_ns);

class CallerCheck {
 public:
  // `admin_group`: its members may act on every process of this host;
  // `loopback`: where this daemon's TCP listener is (plaintext TCP peers).
  CallerCheck(std::optional<gid_t> admin_group, LoopbackPeers loopback);

  // Who made the call of `context` (above). PermissionDenied, saying why,
  // when the caller cannot be identified: a plaintext TCP peer of another
  // user, a connection that closed, a unix socket toclsd did not accept.
  Result<Caller> Identify(const grpc::ServerContext& context) const;

  // Whether uid (with primary group gid) is root or in admin_group (as
  // the group database says: the kernel tells only the primary group).
  bool IsAdmin(uid_t uid, gid_t gid) const;

  // Puts `caller` on `forwarded`, a call to another daemon made for it.
  static void AddForwardedCaller(const Caller& caller, grpc::ClientContext& forwarded);

 private:
  // The caller a trusted forwarding peer names; `peer_itself` when the call
  // was not forwarded.
  static Result<Caller> ForwardedOr(const grpc::ServerContext& context, Caller peer_itself);

  const std::optional<gid_t> admin_group_;
  const LoopbackPeers loopback_;
  const uid_t daemon_uid_;
};

// Who may act on a process of this host (signal it): an administrator
// (above), a caller whose uid is the process's real or saved uid now (as
// kill(2) would allow that uid), or the uid that had the daemon spawn it
// (which kill(2) may not allow: with run_as the process is another user's).
// The process is one the daemon holds by a pidfd, verified as the one that
// connected or the one it started (PeerProcess), so the uids are its own.
// PermissionDenied naming both sides otherwise.
struct ProcessOwners {
  ProcessUids uids;
  std::optional<uid_t> spawned_by;
};
Status MaySignal(const Caller& caller, Gid process, const ProcessOwners& owners);

// Who may read the logs of a process a daemon spawned: an administrator or
// the uid that had it spawned (`spawned_by`).
Status MayReadLog(const Caller& caller, Gid process, uid_t spawned_by);

}  // namespace tocl::directory
