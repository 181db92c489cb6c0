// What Runtime::Notify reports when a watched thread, process or host goes
// away: the payload of the notification message (PVM's pvm_notify) and the
// argument of the callback (Erlang's monitors).
//
//   uint64_t id = *runtime->Notify(me, worker, /*tag=*/99);
//   tocl::Buffer message = *runtime->Recv(me, worker, 99);   // from the watched gid
//   tocl::Result<tocl::ExitNotice> notice = tocl::ParseExitNotice(message);
//   if (notice.ok() && notice->exit_signal) ... killed by *notice->exit_signal
//
// A value type: copy it freely.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tocl/buffer.h"
#include "tocl/export.h"
#include "tocl/gid.h"
#include "tocl/status.h"

namespace tocl {

enum class ExitWhat {
  kExited,       // it (or the process it belongs to) has exited
  kUnreachable,  // its host is down: no heartbeat for the configured time
};
TOCL_EXPORT std::string_view ExitWhatName(ExitWhat what);  // "exited", "unreachable"

struct ExitNotice {
  Gid gid;  // the watched thread, process or host
  ExitWhat what = ExitWhat::kExited;
  // Why, as a sentence: the directory's exit reason, "its process h1.p3
  // exited (...)", "host h3 is down (no heartbeat)".
  std::string reason;
  // When the process that ended it was spawned and reaped by a daemon: its
  // exit(2) status or the signal that killed it.
  std::optional<int> exit_status;
  std::optional<int> exit_signal;
};

// The longest reason a notice carries (longer ones are cut).
inline constexpr size_t kMaxExitReasonBytes = 1024;

// Reads a notification message. InvalidArgument when the bytes are not one
// (a message some thread sent with the same tag, say).
TOCL_EXPORT Result<ExitNotice> ParseExitNotice(const Buffer& message);
TOCL_EXPORT Result<ExitNotice> ParseExitNotice(std::span<const std::byte> bytes);
// The bytes ParseExitNotice reads.
TOCL_EXPORT std::vector<std::byte> EncodeExitNotice(const ExitNotice& notice);

}  // namespace tocl
