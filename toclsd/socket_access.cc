#include "socket_access.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace tocl::daemon {
namespace {

Status Errno(std::string_view operation, const std::string& path) {
  const int error = errno;
  std::string message = fmt::format("{} {}: {}", operation, path, std::strerror(error));
  if (error == EACCES || error == EPERM) return PermissionDenied(message);
  return FailedPrecondition(message);
}

std::string DirectoryOf(const std::string& socket_path) {
  std::string dir = std::filesystem::path(socket_path).parent_path().string();
  return dir.empty() ? "." : dir;
}

bool SameDirectory(const std::string& a, const std::string& b) {
  std::error_code error;
  return std::filesystem::equivalent(a, b, error) && !error;
}

// Only the daemon's user (or root) may change `dir`: otherwise someone
// else could put their own socket where clients look for the daemon's.
Status CheckDirectoryIsPrivate(const std::string& dir) {
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0) {
    return FailedPrecondition(
        fmt::format("the socket's directory {}: {} (create it first)", dir, std::strerror(errno)));
  }
  if (!S_ISDIR(info.st_mode)) {
    return FailedPrecondition(fmt::format("the socket's directory {} is not a directory", dir));
  }
  if (info.st_uid != ::geteuid() && info.st_uid != 0) {
    return PermissionDenied(fmt::format(
        "the socket's directory {} belongs to uid {}, not to toclsd's user (uid {}) or root: "
        "its owner could replace the socket; choose another --socket",
        dir, info.st_uid, ::geteuid()));
  }
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return PermissionDenied(fmt::format(
        "the socket's directory {} can be written by other users (mode {:04o}): they could "
        "replace the socket; choose a directory only toclsd's user can write to",
        dir, info.st_mode & 07777));
  }
  return Status::Ok();
}

}  // namespace

Status PrepareSocketDirectory(const std::string& socket_path, const std::string& state_dir,
                              std::optional<gid_t> socket_group) {
  const std::string dir = DirectoryOf(socket_path);
  if (SameDirectory(dir, state_dir)) {
    // Execute only for the group: it reaches the socket by name, lists
    // nothing, and the files in here are not readable by it.
    if (socket_group) {
      if (::chown(state_dir.c_str(), static_cast<uid_t>(-1), *socket_group) != 0) {
        return Errno(fmt::format("give socket_group (gid {}) the state directory", *socket_group),
                     state_dir);
      }
      if (::chmod(state_dir.c_str(), 0710) != 0) return Errno("chmod 0710", state_dir);
    } else if (::chmod(state_dir.c_str(), 0700) != 0) {
      // A directory that is not ours to change passes if it is private anyway.
      spdlog::warn("cannot make the state directory {} 0700: {}", state_dir, std::strerror(errno));
    }
    return CheckDirectoryIsPrivate(dir);
  }
  TOCL_RETURN_IF_ERROR(CheckDirectoryIsPrivate(dir));
  if (socket_group) {
    struct stat info {};
    const bool group_passes = ::stat(dir.c_str(), &info) == 0 &&
                              ((info.st_mode & S_IXOTH) != 0 ||
                               (info.st_gid == *socket_group && (info.st_mode & S_IXGRP)));
    if (!group_passes) {
      spdlog::warn(
          "socket_group (gid {}) cannot enter the socket's directory {} (mode {:04o}, gid {}): "
          "its members cannot connect; toclsd changes only its own state directory",
          *socket_group, dir, info.st_mode & 07777, info.st_gid);
    }
  }
  return Status::Ok();
}

Status RestrictSocketFile(const std::string& socket_path, std::optional<gid_t> socket_group) {
  if (socket_group) {
    if (::chown(socket_path.c_str(), static_cast<uid_t>(-1), *socket_group) != 0) {
      return Errno(fmt::format("give socket_group (gid {}) the socket", *socket_group),
                   socket_path);
    }
    if (::chmod(socket_path.c_str(), 0660) != 0) return Errno("chmod 0660", socket_path);
    return Status::Ok();
  }
  if (::chmod(socket_path.c_str(), 0600) != 0) return Errno("chmod 0600", socket_path);
  return Status::Ok();
}

Status RestrictDatabaseFiles(const std::string& database_path) {
  for (const std::string& path : {database_path, database_path + "-wal", database_path + "-shm"}) {
    if (::chmod(path.c_str(), 0600) != 0 && errno != ENOENT) return Errno("chmod 0600", path);
  }
  return Status::Ok();
}

ScopedUmask::ScopedUmask(mode_t mask) : previous_(::umask(mask)) {}

ScopedUmask::~ScopedUmask() {
  ::umask(previous_);
}

}  // namespace tocl::daemon
