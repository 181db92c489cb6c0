// What the directory's change stream means for the runtime beyond exits
// (Runtime::Impl::OnExited, told first): hosts that go down and come back
// (PeerRoutes fails and resets their queues), calls that will get no
// reply (ReplyMailboxes: SpawnThread, multicast), exit notifications (Notifier).
#pragma once

#include "tocl/entity.h"

namespace tocl::runtime {

class Notifier;
class PeerRoutes;
class ReplyMailboxes;

// One change, on the link's watcher thread.
void ApplyClusterChange(const ChangeEvent& event, PeerRoutes& routes, ReplyMailboxes& replies,
                        Notifier& notifier);

}  // namespace tocl::runtime
