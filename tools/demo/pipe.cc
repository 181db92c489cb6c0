#include "pipe.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

namespace tocl::demo {
namespace {

// Waits until `fd` is readable (data or end of file) or `deadline` passes.
Status WaitReadable(const Fd& fd, Deadline deadline) {
  while (true) {
    int timeout_ms = -1;
    if (deadline != kNoDeadline) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return DeadlineExceeded("timed out waiting on a pipe");
      timeout_ms = static_cast<int>(std::min<int64_t>(left.count(), INT_MAX));
    }
    pollfd entry{fd.get(), POLLIN, 0};
    const int ready = ::poll(&entry, 1, timeout_ms);
    if (ready > 0) return Status::Ok();
    if (ready < 0 && errno != EINTR) return ErrnoStatus("poll", errno);
  }
}

// One read(2), retried on EINTR: the byte count, 0 at end of file.
Result<size_t> ReadSome(const Fd& fd, char* buffer, size_t size) {
  while (true) {
    const ssize_t n = ::read(fd.get(), buffer, size);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno != EINTR) return ErrnoStatus("read", errno);
  }
}

}  // namespace

Result<Pipe> Pipe::Open() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus("pipe2", errno);
  return Pipe{Fd(fds[0]), Fd(fds[1])};
}

Status WriteLine(const Fd& fd, std::string_view line) {
  std::string data(line);
  data += '\n';
  std::string_view rest = data;
  while (!rest.empty()) {
    const ssize_t n = ::write(fd.get(), rest.data(), rest.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EPIPE) return Unavailable("the other end closed the pipe");
      return ErrnoStatus("write", errno);
    }
    rest.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

Result<std::string> ReadLine(const Fd& fd, Deadline deadline) {
  // One byte at a time so that nothing after the line is consumed: the
  // lines are short and few.
  std::string line;
  while (true) {
    TOCL_RETURN_IF_ERROR(WaitReadable(fd, deadline));
    char c = 0;
    TOCL_ASSIGN_OR_RETURN(size_t n, ReadSome(fd, &c, 1));
    if (n == 0) return Unavailable("the other end closed the pipe");
    if (c == '\n') return line;
    line += c;
  }
}

Status WaitForClose(const Fd& fd, Deadline deadline) {
  char buffer[256];
  while (true) {
    TOCL_RETURN_IF_ERROR(WaitReadable(fd, deadline));
    TOCL_ASSIGN_OR_RETURN(size_t n, ReadSome(fd, buffer, sizeof(buffer)));
    if (n == 0) return Status::Ok();
  }
}

}  // namespace tocl::demo
