// Pipes between the demo and its child processes: one line per message.
//
//   TOCL_ASSIGN_OR_RETURN(Pipe pipe, Pipe::Open());
//   // after fork(): the child keeps pipe.write, the parent pipe.read
//   TOCL_RETURN_IF_ERROR(WriteLine(pipe.write, "ready h1.p4"));
//   auto line = ReadLine(pipe.read, deadline);  // "ready h1.p4"
//
// Not thread-safe: each end has one user.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "core/posix.h"
#include "tocl/status.h"

namespace tocl::demo {

using Deadline = std::chrono::steady_clock::time_point;
inline constexpr Deadline kNoDeadline = Deadline::max();

struct Pipe {
  Fd read;
  Fd write;

  static Result<Pipe> Open();
};

// Writes `line` and a '\n'. Unavailable when the reader is gone (the
// process ignores SIGPIPE, as tocl-demo does).
Status WriteLine(const Fd& fd, std::string_view line);

// Reads up to and without the next '\n'. DeadlineExceeded when `deadline`
// passes first; Unavailable when the writer closed its end before a whole
// line arrived.
Result<std::string> ReadLine(const Fd& fd, Deadline deadline);

// Waits until every writer has closed its end (for a child: it has exited),
// discarding anything still written. DeadlineExceeded when `deadline` passes.
Status WaitForClose(const Fd& fd, Deadline deadline);

}  // namespace tocl::demo
