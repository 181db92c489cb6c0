#include "spawn/log_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <set>

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
  chunk.offset = offset;
  if (offset >= chunk.size) return chunk;
  // A hole is output Cap dropped: the chunk starts at the next byte kept.
  const off_t data = ::lseek(file.get(), static_cast<off_t>(offset), SEEK_DATA);
  if (data < 0 && errno != ENXIO) return ErrnoStatus("seek " + path, errno);
  chunk.offset = data < 0 ? chunk.size : static_cast<uint64_t>(data);
  if (chunk.offset >= chunk.size) {
    chunk.offset = chunk.size;
    return chunk;
  }
  chunk.data.resize(std::min<uint64_t>(max_bytes, chunk.size - chunk.offset));
  size_t filled = 0;
  while (filled < chunk.data.size()) {
    ssize_t n = ::pread(file.get(), chunk.data.data() + filled, chunk.data.size() - filled,
                        static_cast<off_t>(chunk.offset + filled));
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

namespace {

// Punches the head of `path` so that its last `max_bytes` (to a block) stay.
Status CapFile(const std::string& path, uint64_t max_bytes) {
  Fd file(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!file.valid()) {
    if (errno == ENOENT) return Status::Ok();
    return ErrnoStatus("open " + path, errno);
  }
  struct stat info {};
  if (::fstat(file.get(), &info) != 0) return ErrnoStatus("stat " + path, errno);
  const uint64_t size = static_cast<uint64_t>(info.st_size);
  if (size <= max_bytes) return Status::Ok();
  const uint64_t block = info.st_blksize > 0 ? static_cast<uint64_t>(info.st_blksize) : 4096;
  const uint64_t cut = (size - max_bytes) / block * block;
  if (cut == 0) return Status::Ok();
  // Already punched up to there (the usual case, checked every second)?
  const off_t data = ::lseek(file.get(), 0, SEEK_DATA);
  if (data >= 0 && static_cast<uint64_t>(data) >= cut) return Status::Ok();
  if (::fallocate(file.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                  static_cast<off_t>(cut)) != 0) {
    if (errno == EOPNOTSUPP) {
      return Status(StatusCode::kUnimplemented,
                    fmt::format("the file system of {} cannot drop the head of a file "
                                "(no FALLOC_FL_PUNCH_HOLE)",
                                path));
    }
    return ErrnoStatus("punch the head of " + path, errno);
  }
  return Status::Ok();
}

Status RemoveFile(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("remove " + path, errno);
  return Status::Ok();
}

}  // namespace

Status LogFiles::Cap(Gid process, uint64_t max_bytes) const {
  TOCL_RETURN_IF_ERROR(CapFile(PathOf(process, pb::LOG_STREAM_STDOUT), max_bytes));
  return CapFile(PathOf(process, pb::LOG_STREAM_STDERR), max_bytes);
}

Status LogFiles::Remove(Gid process) const {
  TOCL_RETURN_IF_ERROR(RemoveFile(PathOf(process, pb::LOG_STREAM_STDOUT)));
  return RemoveFile(PathOf(process, pb::LOG_STREAM_STDERR));
}

Result<std::vector<Gid>> LogFiles::List(Gid host) const {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(dir_.c_str()), ::closedir);
  if (!dir) return ErrnoStatus("list " + dir_, errno);
  std::set<Gid> processes;
  for (;;) {
    errno = 0;
    const dirent* entry = ::readdir(dir.get());
    if (entry == nullptr) {
      if (errno != 0) return ErrnoStatus("list " + dir_, errno);
      break;
    }
    std::string_view name = entry->d_name;
    const size_t dot = name.rfind('.');
    if (dot == std::string_view::npos) continue;
    const std::string_view suffix = name.substr(dot + 1);
    if (suffix != "out" && suffix != "err") continue;
    Result<Gid> gid = Gid::Parse(name.substr(0, dot));
    if (gid.ok() && gid->is_process() && gid->host() == host) processes.insert(*gid);
  }
  return std::vector<Gid>(processes.begin(), processes.end());
}

}  // namespace tocl::daemon::spawn
