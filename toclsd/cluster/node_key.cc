#include "cluster/node_key.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

namespace tocl::daemon::cluster {

bool IsNodeKey(std::string_view key) {
  return key.size() == kNodeKeyChars &&
         key.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

Result<std::string> LoadOrCreateNodeKey(const std::string& path) {
  std::ifstream existing(path);
  if (existing) {
    std::stringstream text;
    text << existing.rdbuf();
    std::string key = text.str();
    while (!key.empty() && (key.back() == '\n' || key.back() == ' ')) key.pop_back();
    if (!IsNodeKey(key)) {
      return DataLoss(fmt::format(
          "{} does not hold a node key ({} hex digits); remove it to get a new one (the seed "
          "then treats this daemon as a new one)",
          path, kNodeKeyChars));
    }
    return key;
  }
  // std::random_device reads the kernel's getrandom() on Linux.
  std::random_device random;
  std::string key;
  for (size_t i = 0; i < kNodeKeyChars / 8; ++i) key += fmt::format("{:08x}", random());
  std::string line = key + "\n";
  // O_EXCL: two daemons cannot both create it (the state lock already
  // prevents that; this keeps a key from ever being overwritten).
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Unavailable(fmt::format("cannot create node key {}: {}", path, std::strerror(errno)));
  }
  bool written = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
                 ::fsync(fd) == 0;
  int saved = errno;
  ::close(fd);
  if (!written) {
    ::unlink(path.c_str());
    return Unavailable(fmt::format("cannot write node key {}: {}", path, std::strerror(saved)));
  }
  return key;
}

}  // namespace tocl::daemon::cluster
