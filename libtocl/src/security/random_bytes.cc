#include "security/random_bytes.h"

#include <sys/random.h>

#include <cerrno>

#include "core/posix.h"

namespace tocl::security {

Status FillRandom(std::span<std::byte> out) {
  size_t filled = 0;
  while (filled < out.size()) {
    const ssize_t n = getrandom(out.data() + filled, out.size() - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("getrandom", errno);
    filled += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace tocl::security
