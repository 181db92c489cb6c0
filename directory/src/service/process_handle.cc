#include "service/process_handle.h"

#include <fmt/format.h>
#include <signal.h>

#include <cerrno>
#include <optional>
#include <string>

#include "core/proc_files.h"

// glibc 2.36's <sys/pidfd.h> lacks __BEGIN_DECLS (fixed in 2.37).
extern "C" {
#include <sys/pidfd.h>
}

namespace tocl::directory {

Result<ProcessHandle> ProcessHandle::Open(pid_t pid) {
  if (pid <= 0) return InvalidArgument(fmt::format("{} is not a process id", pid));
  Fd pidfd(::pidfd_open(pid, 0));
  if (!pidfd.valid()) {
    if (errno == ESRCH) return NotFound(fmt::format("process {} has exited", pid));
    return ErrnoStatus(fmt::format("pidfd_open({})", pid), errno);
  }
  return ProcessHandle(pid, std::move(pidfd));
}

Status ProcessHandle::Signal(int signal) const {
  if (::pidfd_send_signal(pidfd_.get(), signal, nullptr, 0) == 0) return Status::Ok();
  if (errno == ESRCH) return FailedPrecondition(fmt::format("os process {} has exited", pid_));
  return ErrnoStatus(fmt::format("signal {} to pid {}", signal, pid_), errno);
}

Status ProcessHandle::CheckAlive() const {
  // EPERM comes after the kernel found the process: alive, of a user a
  // daemon that is not root may not signal.
  if (::pidfd_send_signal(pidfd_.get(), 0, nullptr, 0) == 0 || errno == EPERM) {
    return Status::Ok();
  }
  if (errno == ESRCH) return FailedPrecondition(fmt::format("os process {} has exited", pid_));
  return ErrnoStatus(fmt::format("signal 0 to pid {}", pid_), errno);
}

Result<std::string> ProcessHandle::ReadOwnProcFile(const char* name) const {
  std::optional<std::string> text = ReadProcFile(pid_, name);
  // Alive after the read: /proc/<pid> was still its own.
  TOCL_RETURN_IF_ERROR(CheckAlive());
  if (!text) return Internal(fmt::format("cannot read /proc/{}/{}", pid_, name));
  return std::move(*text);
}

Result<ProcessUids> ProcessHandle::Uids() const {
  TOCL_ASSIGN_OR_RETURN(std::string status, ReadOwnProcFile("status"));
  std::optional<ProcessUids> uids = ParseUids(status);
  if (!uids) return Internal(fmt::format("no Uid line in /proc/{}/status", pid_));
  return *uids;
}

Result<std::vector<pid_t>> ProcessHandle::NamespacePids() const {
  TOCL_ASSIGN_OR_RETURN(std::string status, ReadOwnProcFile("status"));
  std::optional<std::vector<pid_t>> pids = ParseNamespacePids(status);
  if (!pids) return NotFound(fmt::format("/proc/{}/status has no NSpid line", pid_));
  return std::move(*pids);
}

Result<uint64_t> ProcessHandle::StartTicks() const {
  TOCL_ASSIGN_OR_RETURN(std::string stat, ReadOwnProcFile("stat"));
  std::optional<uint64_t> ticks = ParseStartTicks(stat);
  if (!ticks) return Internal(fmt::format("no start time in /proc/{}/stat", pid_));
  return *ticks;
}

}  // namespace tocl::directory
