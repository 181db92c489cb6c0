#include "spawn/log_files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace tocl::daemon::spawn {

Result<LogFiles> LogFiles::Open(std::string dir) {
  if (::mkdir(dir.c_str(), 0750) != 0 && errno != EEXIST) {
    return ErrnoStatus(fmt::format("create the spawn log directory {}", dir), errno);
  }
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return FailedPrecondition(fmt::format("{} is not a directory", dir));
  }
  return LogFiles(std::move(dir));
}

std::string LogFiles::PathOf(Gid process, pb::LogStream stream) const {
  return fmt::format("{}/{}.{}", dir_, process.ToString(),
                     stream == pb::LOG_STREAM_STDERR ? "err" : "out");
}

namespace {

// A log file, as a descriptor above stderr: a daemon started with fd 0, 1
// or 2 closed would get one of those, and the child's own 0..2 are set up
// from these descriptors.
Result<Fd> CreateLog(const std::string& path) {
  constexpr int kFlags = O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC;
  Fd file(::open(path.c_str(), kFlags, 0640));
  if (!file.valid()) return ErrnoStatus("create " + path, errno);
  if (file.get() > STDERR_FILENO) return file;
  Fd moved(::fcntl(file.get(), F_DUPFD_CLOEXEC, STDERR_FILENO + 1));
  if (!moved.valid()) return ErrnoStatus("dup " + path, errno);
  return moved;
}

}  // namespace

Result<std::pair<Fd, Fd>> LogFiles::Create(Gid process, uid_t spawned_for) const {
  TOCL_ASSIGN_OR_RETURN(Fd out, CreateLog(PathOf(process, pb::LOG_STREAM_STDOUT)));
  TOCL_ASSIGN_OR_RETURN(Fd err, CreateLog(PathOf(process, pb::LOG_STREAM_STDERR)));
  if (::geteuid() == 0 && spawned_for != 0) {
    for (const Fd* file : {&out, &err}) {
      if (::fchown(file->get(), spawned_for, static_cast<gid_t>(-1)) != 0) {
        return ErrnoStatus(
            fmt::format("give the logs of {} to uid {}", process.ToString(), spawned_for), errno);
      }
    }
  }
  return std::make_pair(std::move(out), std::move(err));
}

std::optional<uid_t> LogFiles::OwnerOf(Gid process) const {
  struct stat info {};
  if (::stat(PathOf(process, pb::LOG_STREAM_STDOUT).c_str(), &info) != 0) return std::nullopt;
  return info.st_uid;
}

Result<LogFiles::Chunk> LogFiles::Read(Gid process, pb::LogStream stream, uint64_t offset,
                                       size_t max_bytes) const {
  const std::string path = PathOf(process, stream);
  Fd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!file.valid()) {
    if (errno == ENOENT) {
      return NotFound(
          fmt::format("{} was not spawned by a daemon, so it has no logs", process.ToString()));
    }
    return ErrnoStatus("open " + path, errno);
  }
  struct stat info {};
  if (::fstat(file.get(), &info) != 0) return ErrnoStatus("stat " + path, errno);
  Chunk chunk;
  chunk.size = static_cast<uint64_t>(info.st_size);
  if (offset >= chunk.size) return chunk;
  chunk.data.resize(std::min<uint64_t>(max_bytes, chunk.size - offset));
  size_t filled = 0;
  while (filled < chunk.data.size()) {
    ssize_t n = ::pread(file.get(), chunk.data.data() + filled, chunk.data.size() - filled,
                        static_cast<off_t>(offset + filled));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("read " + path, errno);
    }
    if (n == 0) break;  // truncated meanwhile
    filled += static_cast<size_t>(n);
  }
  chunk.data.resize(filled);
  return chunk;
}

}  // namespace tocl::daemon::spawn
