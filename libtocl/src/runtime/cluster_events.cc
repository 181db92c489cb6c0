#include "runtime/cluster_events.h"

#include <fmt/format.h>

#include "runtime/notifier.h"
#include "runtime/peer_routes.h"
#include "runtime/reply_mailboxes.h"

namespace tocl::runtime {

void ApplyClusterChange(const ChangeEvent& event, PeerRoutes& routes, ReplyMailboxes& replies,
                        Notifier& notifier) {
  switch (event.op) {
    case ChangeOp::kExited:
      if (event.gid.is_process()) {
        replies.FailPending(event.gid, ProcessExitedStatus(event.gid, event.entity.exit_reason));
      }
      break;
    case ChangeOp::kUnreachable:
      // Its peers fail; sends to it fail at once until it comes back.
      if (event.gid.is_host()) {
        const Status why = Unavailable(HostDownReason(event.gid));
        routes.HostDown(event.gid, why);
        replies.FailPending(event.gid, why);
      }
      break;
    case ChangeOp::kReachable:
      if (event.gid.is_host()) routes.HostUp(event.gid);
      break;
    default:
      break;
  }
  notifier.OnChange(event);
}

}  // namespace tocl::runtime
