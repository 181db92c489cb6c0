#include "failure_check.h"

#include <atomic>
#include <exception>

namespace tocl::testing {
namespace {

// Set before the tests start, read by harness destructors: relaxed is
// enough, the test framework's start orders the two.
std::atomic<bool (*)()> g_check{nullptr};

}  // namespace

void SetTestFailedCheck(bool (*check)()) {
  g_check.store(check, std::memory_order_relaxed);
}

bool CurrentTestFailed() {
  bool (*check)() = g_check.load(std::memory_order_relaxed);
  if (check != nullptr && check()) return true;
  return std::uncaught_exceptions() > 0;
}

}  // namespace tocl::testing
