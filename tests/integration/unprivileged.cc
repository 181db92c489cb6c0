#include "unprivileged.h"

#include <grp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

namespace tocl::testing {

bool CanSwitchUsers() {
  return ::geteuid() == 0;
}

int RunAsNobody(const std::function<int()>& action) {
  const pid_t pid = ::fork();
  if (pid < 0) return 127;
  if (pid == 0) {
    // Raw calls only: after fork in a threaded process, nothing that locks.
    if (::setgroups(0, nullptr) != 0 || ::setgid(kNogroupGid) != 0 || ::setuid(kNobodyUid) != 0) {
      ::_exit(126);
    }
    ::_exit(action());
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 127;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 127;
}

int ConnectAsNobody(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  path.copy(address.sun_path, sizeof(address.sun_path) - 1);
  return RunAsNobody([&address] {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 125;
    const int result =
        ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0 ? 0
                                                                                         : errno;
    ::close(fd);
    return result;
  });
}

}  // namespace tocl::testing
