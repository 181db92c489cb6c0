#include "service/caller.h"

#include <fmt/format.h>
#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <vector>

#include "core/parse_number.h"
#include "grpc_tls/tls_credentials.h"
#include "service/accept_times.h"
#include "service/daemon_stubs.h"

// Linux 6.5; glibc 2.36 does not name it yet.
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

namespace tocl::directory {
namespace {

constexpr std::string_view kFdPeerPrefix = "fd:";

std::optional<std::string_view> Metadata(const grpc::ServerContext& context, const char* key) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(key);
  if (it == metadata.end()) return std::nullopt;
  return std::string_view(it->second.data(), it->second.size());
}

// A pidfd the daemon could not have for want of descriptors, said so.
Status OutOfDescriptors(pid_t pid, const Status& why) {
  return ResourceExhausted(
      fmt::format("the daemon has no file descriptors left to hold process {} ({}); raise its "
                  "RLIMIT_NOFILE (LimitNOFILE= in its systemd unit)",
                  pid, why.message()));
}

}  // namespace

std::string Caller::Describe() const {
  switch (channel) {
    case Channel::kUnixSocket:
      return fmt::format("uid {} (pid {}) on the unix socket", uid, pid);
    case Channel::kLoopbackTcp:
      return fmt::format("uid {} over loopback TCP ({})", uid, peer);
    case Channel::kCertificate:
      return fmt::format("a holder of the cluster's credentials ({})", peer);
    case Channel::kForwarded:
      return fmt::format("uid {} of another host ({}, forwarded by {})", uid, peer,
                         forwarded_by.empty() ? "?" : forwarded_by);
  }
  return "?";
}

std::optional<int> UnixConnectionFd(const grpc::ServerContext& context) {
  const std::string peer = context.peer();
  if (!peer.starts_with(kFdPeerPrefix)) return std::nullopt;
  const std::optional<int> fd =
      ParseNumber<int>(std::string_view(peer).substr(kFdPeerPrefix.size()));
  if (!fd || *fd < 0) return std::nullopt;
  return fd;
}

Result<UnixPeer> UnixPeerOf(int fd) {
  ucred credentials{};
  socklen_t size = sizeof(credentials);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &size) != 0) {
    return ErrnoStatus("SO_PEERCRED of the caller's connection", errno);
  }
  if (credentials.pid <= 0) {
    return PermissionDenied("the kernel names no process for the caller's connection");
  }
  return UnixPeer{credentials.pid, credentials.uid, credentials.gid};
}

Result<ProcessHandle> PinProcessStartedBy(pid_t pid, int64_t accepted_ns) {
  Result<ProcessHandle> process = ProcessHandle::Open(pid);
  if (process.status().code() == StatusCode::kResourceExhausted) {
    return OutOfDescriptors(pid, process.status());
  }
  TOCL_RETURN_IF_ERROR(process.status());
  TOCL_ASSIGN_OR_RETURN(uint64_t started, process->StartTicks());
  const uint64_t accepted = BootTicks(accepted_ns);
  if (started > accepted) {
    return PermissionDenied(fmt::format(
        "pid {} started (tick {}) after its connection was accepted (tick {}): the process "
        "that connected has exited and its pid belongs to another",
        pid, started, accepted));
  }
  return std::move(*process);
}

Result<ProcessHandle> PeerProcess(int fd, const UnixPeer& peer,
                                  std::optional<int64_t> accepted_ns) {
  int pidfd = -1;
  socklen_t size = sizeof(pidfd);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &size) == 0) {
    if (pidfd >= 0) return ProcessHandle(peer.pid, Fd(pidfd));
    return Internal(fmt::format("SO_PEERPIDFD gave no descriptor for pid {}", peer.pid));
  }
  const int error = errno;
  if (error == EMFILE || error == ENFILE) {
    return OutOfDescriptors(peer.pid, ErrnoStatus("SO_PEERPIDFD", error));
  }
  // Only a kernel without the option (before Linux 6.5) takes the pid's
  // word; one with it answers EINVAL or ESRCH for a process that is gone.
  if (error != ENOPROTOOPT) {
    return NotFound(fmt::format("the process that connected (pid {}) is gone: SO_PEERPIDFD: {}",
                                peer.pid, std::strerror(error)));
  }
  if (!accepted_ns) {
    return Internal(fmt::format(
        "no accept time for the connection of pid {}: its pid cannot be checked", peer.pid));
  }
  return PinProcessStartedBy(peer.pid, *accepted_ns);
}

CallerCheck::CallerCheck(std::optional<gid_t> admin_group, LoopbackPeers loopback)
    : admin_group_(admin_group), loopback_(std::move(loopback)), daemon_uid_(::geteuid()) {}

bool CallerCheck::IsAdmin(uid_t uid, gid_t gid) const {
  if (uid == 0) return true;
  if (!admin_group_) return false;
  if (gid == *admin_group_) return true;
  passwd entry{};
  passwd* found = nullptr;
  std::vector<char> buffer(16384);
  if (::getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr) {
    return false;
  }
  int count = 64;
  std::vector<gid_t> groups(count);
  if (::getgrouplist(entry.pw_name, entry.pw_gid, groups.data(), &count) < 0) {
    groups.resize(count);
    if (::getgrouplist(entry.pw_name, entry.pw_gid, groups.data(), &count) < 0) return false;
  }
  groups.resize(count);
  for (gid_t group : groups) {
    if (group == *admin_group_) return true;
  }
  return false;
}

Result<Caller> CallerCheck::Identify(const grpc::ServerContext& context) const {
  if (std::optional<int> fd = UnixConnectionFd(context)) {
    TOCL_ASSIGN_OR_RETURN(UnixPeer peer, UnixPeerOf(*fd));
    return Caller{.channel = Caller::Channel::kUnixSocket,
                  .pid = peer.pid,
                  .uid = peer.uid,
                  .gid = peer.gid,
                  .admin = IsAdmin(peer.uid, peer.gid)};
  }
  const std::string peer = context.peer();
  if (grpc_tls::PeerAuthenticated(context)) {
    return ForwardedOr(
        context, Caller{.channel = Caller::Channel::kCertificate, .admin = true, .peer = peer});
  }
  if (peer.starts_with("ipv4:") || peer.starts_with("ipv6:")) {
    TOCL_ASSIGN_OR_RETURN(uid_t uid, loopback_.OwnerOf(peer));
    if (uid != 0 && uid != daemon_uid_) {
      return PermissionDenied(fmt::format(
          "over TCP without credentials only toclsd's own user (uid {}) and root are served; "
          "{} is uid {}: use the unix socket",
          daemon_uid_, peer, uid));
    }
    return ForwardedOr(
        context,
        Caller{.channel = Caller::Channel::kLoopbackTcp, .uid = uid, .admin = true, .peer = peer});
  }
  return PermissionDenied(fmt::format(
      "the caller {} cannot be identified (only connections toclsd accepted on its unix socket "
      "and TCP peers are)",
      peer));
}

Result<Caller> CallerCheck::ForwardedOr(const grpc::ServerContext& context, Caller peer_itself) {
  const std::optional<std::string_view> uid_text = Metadata(context, kCallerUidKey);
  if (!uid_text) return peer_itself;
  const std::optional<uid_t> uid = ParseNumber<uid_t>(*uid_text);
  if (!uid) {
    return InvalidArgument(fmt::format("{} of a forwarded call is not a uid", kCallerUidKey));
  }
  const std::optional<std::string_view> admin = Metadata(context, kCallerAdminKey);
  // The mark is the sender's text ("h1"): only printable and short, in a log.
  std::string mark(Metadata(context, kForwardedByKey).value_or("").substr(0, 32));
  for (char& c : mark) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return Caller{.channel = Caller::Channel::kForwarded,
                .uid = *uid,
                .admin = admin.has_value() && *admin == "1",
                .peer = std::move(peer_itself.peer),
                .forwarded_by = std::move(mark)};
}

void CallerCheck::AddForwardedCaller(const Caller& caller, grpc::ClientContext& forwarded) {
  forwarded.AddMetadata(kCallerUidKey, std::to_string(caller.uid));
  forwarded.AddMetadata(kCallerAdminKey, caller.admin ? "1" : "0");
}

Status MaySignal(const Caller& caller, Gid process, const ProcessOwners& owners) {
  if (caller.admin || caller.uid == owners.uids.real || caller.uid == owners.uids.saved ||
      (owners.spawned_by && caller.uid == *owners.spawned_by)) {
    return Status::Ok();
  }
  return PermissionDenied(fmt::format(
      "{} may not signal {}, a process of uid {}{}: a caller signals the processes of its own "
      "uid and those it had spawned; root and admin_group members signal any",
      caller.Describe(), process.ToString(), owners.uids.real,
      owners.spawned_by ? fmt::format(" spawned for uid {}", *owners.spawned_by) : ""));
}

Status MayReadLog(const Caller& caller, Gid process, uid_t spawned_by) {
  if (caller.admin || caller.uid == spawned_by) return Status::Ok();
  return PermissionDenied(fmt::format(
      "{} may not read the logs of {}, spawned for uid {}: logs are read by whoever had the "
      "process spawned, root and admin_group members",
      caller.Describe(), process.ToString(), spawned_by));
}

}  // namespace tocl::directory
