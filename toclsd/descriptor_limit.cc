#include "descriptor_limit.h"

#include <cerrno>

#include "core/posix.h"

namespace tocl::daemon {

Result<rlimit> RaiseDescriptorLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return ErrnoStatus("getrlimit(NOFILE)", errno);
  if (limit.rlim_cur == limit.rlim_max) return limit;
  rlimit raised = limit;
  raised.rlim_cur = limit.rlim_max;
  // Always allowed: Linux keeps the hard limit within fs.nr_open.
  if (::setrlimit(RLIMIT_NOFILE, &raised) != 0) {
    return ErrnoStatus("setrlimit(NOFILE)", errno);
  }
  return raised;
}

}  // namespace tocl::daemon
