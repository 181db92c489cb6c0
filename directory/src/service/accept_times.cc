#include "service/accept_times.h"

#include <time.h>
#include <unistd.h>

namespace tocl::directory {

int64_t BootTimeNs() {
  timespec now{};
  ::clock_gettime(CLOCK_BOOTTIME, &now);
  return int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

int64_t NsPerTick() {
  static const int64_t kNsPerTick = 1'000'000'000 / ::sysconf(_SC_CLK_TCK);
  return kNsPerTick;
}

uint64_t BootTicks(int64_t boot_ns) {
  return static_cast<uint64_t>(boot_ns / NsPerTick());
}

void AcceptTimes::Accepted(int fd) {
  const int64_t now = BootTimeNs();
  std::lock_guard lock(mu_);
  accepted_ns_[fd] = now;
}

std::optional<int64_t> AcceptTimes::AcceptedAt(int fd) const {
  std::lock_guard lock(mu_);
  auto it = accepted_ns_.find(fd);
  if (it == accepted_ns_.end()) return std::nullopt;
  return it->second;
}

}  // namespace tocl::directory
