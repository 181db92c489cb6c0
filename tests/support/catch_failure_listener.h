// A Catch2 listener that counts the running test case's failed assertions
// and installs them as the harness's failure check (failure_check.h), so
// that a Daemon or NetnsCluster going away in a failed test prints its log.
//
// Include it in exactly one source file of a test binary, before any other
// Catch2 include and with CATCH_CONFIG_EXTERNAL_INTERFACES defined:
//
//   #define CATCH_CONFIG_EXTERNAL_INTERFACES
//   #include "catch_failure_listener.h"
#pragma once

#ifndef CATCH_CONFIG_EXTERNAL_INTERFACES
#error "define CATCH_CONFIG_EXTERNAL_INTERFACES before including catch_failure_listener.h"
#endif

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <exception>

#include "failure_check.h"

namespace tocl::testing {
namespace {

// Failed assertions of the running test case.
std::atomic<uint64_t> g_failed_assertions{0};

bool CatchTestFailed() {
  return g_failed_assertions > 0 || std::uncaught_exceptions() > 0;
}

class FailureCounter : public Catch::TestEventListenerBase {
 public:
  explicit FailureCounter(const Catch::ReporterConfig& config) : TestEventListenerBase(config) {
    SetTestFailedCheck(&CatchTestFailed);
  }
  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    g_failed_assertions = 0;
    TestEventListenerBase::testCaseStarting(info);
  }
  bool assertionEnded(const Catch::AssertionStats& stats) override {
    if (!stats.assertionResult.isOk()) ++g_failed_assertions;
    return TestEventListenerBase::assertionEnded(stats);
  }
};
CATCH_REGISTER_LISTENER(FailureCounter)

}  // namespace
}  // namespace tocl::testing
