// The thread indexes a runtime keeps for itself: the last ThreadTable chunk
// (kInternalThreads of them). The spawn service listens at the very last
// one, a process's multicast relay (multicast_service.h) at the one
// before; the others are private reply mailboxes (reply_mailboxes.h). None is ever enrolled with
// the directory, and the public API refuses them, so no user Send can
// reach them and no user Recv can take their messages.
#pragma once

#include <fmt/format.h>

#include <cstdint>

#include "tocl/gid.h"
#include "tocl/runtime.h"
#include "tocl/status.h"

namespace tocl::runtime {

inline constexpr uint32_t kFirstInternalThread = Gid::kMaxThread + 1 - kInternalThreads;
inline constexpr uint32_t kServiceThread = Gid::kMaxThread;
inline constexpr uint32_t kRelayThread = kServiceThread - 1;
// Reply mailboxes: kFirstInternalThread .. kRelayThread - 1.
inline constexpr uint32_t kReplyMailboxes = kRelayThread - kFirstInternalThread;

inline bool IsInternalThread(Gid gid) {
  return gid.thread_index() >= kFirstInternalThread;
}

// The error for a user's call that names one of them.
inline Status ReservedThread(Gid gid) {
  return InvalidArgument(fmt::format(
      "{} is one of the thread ids the runtime keeps for itself (thread indexes from {})",
      gid.ToString(), kFirstInternalThread));
}

// Ok unless a user's send names one of them, as sender or receiver.
inline Status CheckUserEnds(Gid from, Gid to) {
  if (IsInternalThread(from)) return ReservedThread(from);
  if (IsInternalThread(to)) return ReservedThread(to);
  return Status::Ok();
}

// The spawn service of `process`.
inline Gid ServiceOf(Gid process) {
  return Gid::Thread(process, kServiceThread);
}

// The multicast relay of `process`.
inline Gid RelayOf(Gid process) {
  return Gid::Thread(process, kRelayThread);
}

// Tags of the internal protocol (only internal mailboxes see them, so they
// cannot clash with users' tags).
inline constexpr Tag kSpawnThreadRequestTag = 1;
inline constexpr Tag kSpawnThreadReplyTag = 2;
inline constexpr Tag kMulticastRequestTag = 3;
inline constexpr Tag kMulticastReplyTag = 4;

}  // namespace tocl::runtime
