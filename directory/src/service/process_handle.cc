#include "service/process_handle.h"

#include <fmt/format.h>
#include <signal.h>

#include <cerrno>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

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

Result<ProcessUids> ProcessHandle::Uids() const {
  std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
  std::string line;
  std::optional<ProcessUids> uids;
  while (std::getline(status, line)) {
    if (!line.starts_with("Uid:")) continue;
    std::istringstream fields(line.substr(4));
    ProcessUids read;
    if (fields >> read.real >> read.effective >> read.saved) uids = read;
    break;
  }
  // Signal 0 through the pidfd: the process was alive after the read, so
  // /proc/<pid> was still its own (a pid is not reused before its process
  // is reaped).
  TOCL_RETURN_IF_ERROR(Signal(0));
  if (!uids) return Internal(fmt::format("no Uid line in /proc/{}/status", pid_));
  return *uids;
}

}  // namespace tocl::directory
