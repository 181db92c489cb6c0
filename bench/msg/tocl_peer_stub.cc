// Linked instead of tocl_peer.cc while the runtime library is not built:
// `tocl-bench msg` then measures its baselines only.
#include "tocl_peer.h"

namespace tocl::bench::msg {

bool ToclRuntimeBuilt() {
  return false;
}

Result<std::unique_ptr<ToclPeer>> StartToclPeer(const ToclPeerOptions&) {
  return Status(StatusCode::kUnimplemented, "this tocl-bench was built without the tocl runtime");
}

}  // namespace tocl::bench::msg
