// Whether the running test has failed, for harness objects (Daemon,
// NetnsCluster) that print their logs when they go away in a failed test.
//
// The support libraries do not use Catch2 (tocl-bench links them), so a test
// binary installs the check: tests/support/catch_failure_listener.h counts
// failed assertions and calls SetTestFailedCheck when Catch starts.
// Without an installed check a test counts as failed while an exception
// unwinds.
//
// Threading: set once before tests run; CurrentTestFailed from any thread.
#pragma once

namespace tocl::testing {

void SetTestFailedCheck(bool (*check)());
bool CurrentTestFailed();

}  // namespace tocl::testing
