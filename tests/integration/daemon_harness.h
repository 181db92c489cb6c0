// Test harness for integration tests: real toclsd daemons and real child
// processes, each in its own temporary directory.
//
//   tocl::testing::Daemon daemon;                    // fresh state dir, not started
//   REQUIRE_OK(daemon.Start());                      // forks toclsd, waits until it answers
//   auto client = tocl::DirectoryClient::Connect(daemon.address());
//   ...
//   REQUIRE(daemon.Stop().value_or(-1) == 0);        // SIGTERM: a clean stop exits 0
//
// Daemon, ChildProcess, RunProgram and WaitUntil live in tests/support
// (test_daemon.h, child_process.h: no Catch2, tocl-bench and the netns
// harness use them too); this file adds what only the integration tests
// need, and the Catch2 listener that makes a Daemon going away in a failed
// test print the tail of its log.
//
// Every Daemon has its own mkdtemp() directory under /tmp, no TCP listener
// unless asked and loopback-only networks (DaemonOptions), so tests can run
// twice in a row and in parallel. Synchronisation is by polling with a
// deadline (WaitUntil), never by a bare sleep.
//
// Threading: a Daemon or ChildProcess belongs to one thread (the test's main
// thread: children are started with PR_SET_PDEATHSIG, so the thread that
// starts one must outlive it). The free functions are safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "child_process.h"
#include "temp_dir.h"
#include "test_daemon.h"
#include "tocl/directory_client.h"
#include "tocl/status.h"

namespace tocl::testing {

// Paths of the binaries under test, set by CMake (CliPath() is "" when the
// tocl command line is not built). ToclsdPath() is in test_daemon.h.
const char* EnrollWorkerPath();
const char* CliPath();

// Threads `first` .. `first + count - 1` of `process`, named
// "<name_prefix><index>", each with `attributes`: one batch to register.
std::vector<ThreadInfo> MakeThreads(Gid process, uint32_t first, uint32_t count,
                                    std::string_view name_prefix,
                                    const Attributes& attributes = {});

// Enroll options for a process called `name`.
EnrollOptions ProcessNamed(std::string name, Attributes attributes = {});

// The command line of tocl-enroll-worker (helpers/enroll_worker.cc): enroll
// as `name`, register `threads` threads in batches of `batch`; with `hold`,
// keep the session open until stdin closes (spawn with pipe_stdin).
std::vector<std::string> EnrollWorkerCommand(const std::string& address, const std::string& name,
                                             uint32_t threads, uint32_t batch, bool hold);
// The process gid a worker printed ("gid h1.p5"), NotFound before it did.
Result<Gid> WorkerGid(const std::string& output);

// A daemon for a cluster on loopback: TCP on a port of its own
// (127.0.0.1:0), fast failure detection (heartbeat 0.2 s, down after 1 s);
// the caller adds --seed / --join in `extra_args` or the options.
DaemonOptions LoopbackClusterMember(const std::string& name,
                                    std::vector<std::string> extra_args = {});

}  // namespace tocl::testing
