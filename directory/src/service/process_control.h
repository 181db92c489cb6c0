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

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

#include "service/caller.h"
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
  // (verified) is who asked: the process is spawned for its uid (it may
  // signal it and read its logs), and it is named in the log of refusals.
  virtual Result<pb::SpawnProcessResponse> Spawn(const pb::SpawnProcessRequest& request,
                                                 const Caller& caller,
                                                 std::chrono::milliseconds enroll_timeout) = 0;

  // Sends `signal` (1..64) to `process` if it is a child this control
  // started and has not reaped, through its pidfd, if `caller` may
  // (MaySignal). nullopt when it is not such a child (the service then
  // signals it through its verified enrollment, if any).
  virtual std::optional<Status> KillChild(Gid process, int signal, const Caller& caller) = 0;

  // The uid a process of this host was spawned for; nullopt for one this
  // host's daemon did not spawn (or whose record is gone).
  virtual std::optional<uid_t> SpawnedFor(Gid process) = 0;

  // Reads a log of a process this host's daemon spawned (NotFound for
  // others), if `caller` may (MayReadLog). The request's process is of
  // this host.
  virtual Result<pb::ReadLogResponse> ReadLog(const pb::ReadLogRequest& request,
                                              const Caller& caller) = 0;

  // Before a process enrolls as `process` from the kernel-verified `pid`
  // (nullopt: it enrolls over TCP, its pid unknown): Ok unless `process` is
  // a child this control started as another pid (or is enrolling over TCP):
  // PermissionDenied. Waits (briefly) for a child being started to have
  // its pid.
  virtual Status CheckEnrollingPid(Gid process, std::optional<pid_t> pid) = 0;

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
