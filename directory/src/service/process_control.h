// What the directory service needs from whoever starts and supervises the
// processes of this host (toclsd/spawn implements it; directory/ does not
// depend on toclsd/). The service does placement, permission checks and
// forwarding to other daemons; a ProcessControl acts on this host only.
//
// Threading: every method may be called from any gRPC handler thread, at
// the same time. Spawn blocks until the child enrolls, exits or times out;
// the others return at once (the hooks must: the process may be waiting
// for its stream to end before it exits).
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

#include "tocl/directory/v1/directory.pb.h"
#include "tocl/gid.h"
#include "tocl/status.h"

namespace tocl::directory {

namespace pb = ::tocl::directory::v1;

class ProcessControl {
 public:
  virtual ~ProcessControl() = default;

  // Starts `request`'s program on this host (placement is already decided:
  // request.host() is this host or 0) and waits until it has enrolled, for
  // at most `enroll_timeout`. NotFound / PermissionDenied for an executable
  // that is absent / not executable, InvalidArgument for a bad request,
  // FailedPrecondition when the program exits before it enrolls (and for
  // nothing else: tocl::Status has no ABORTED, the service answers that
  // code for it, as the proto says), DeadlineExceeded when it does not
  // enroll in time (it is killed), Unavailable when the daemon is stopping,
  // PermissionDenied for a program this host does not allow. `caller`
  // describes who asked (the gRPC peer, and the forwarding daemon), for the
  // log of refusals.
  virtual Result<pb::SpawnProcessResponse> Spawn(const pb::SpawnProcessRequest& request,
                                                 std::string_view caller,
                                                 std::chrono::milliseconds enroll_timeout) = 0;

  // Sends `signal` (1..64) to a running process of this host.
  // FailedPrecondition when it is not running, NotFound when unknown.
  virtual Status Kill(Gid process, int signal) = 0;

  // Reads a log of a process this host's daemon spawned (NotFound for
  // others). The request's process is of this host.
  virtual Result<pb::ReadLogResponse> ReadLog(const pb::ReadLogRequest& request) = 0;

  // Hooks: a process enrolled (or re-enrolled) on this daemon. True when it
  // is a child this daemon spawned, enrolling for the first time.
  virtual bool OnEnrolled(Gid process) = 0;
  // The enroll stream of `process` (of re-enroll `epoch`) ended. True when
  // this control supervises the process and takes over marking it exited
  // (so that its exit status goes with the EXITED change); false: the
  // caller marks it (Store::MarkStreamEnded).
  virtual bool OnStreamEnded(Gid process, uint64_t epoch, std::string_view reason) = 0;
};

}  // namespace tocl::directory
