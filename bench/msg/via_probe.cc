// ViaIbverbsDevicePresent (tocl_peer.h): asks the via subsystem's ibverbs
// provider, when this build has one (TOCL_BENCH_WITH_VIA, set by
// bench/CMakeLists.txt when the runtime is linked with via).
#include "tocl_peer.h"

#if TOCL_BENCH_WITH_VIA
#include "subsystem/via/provider.h"
#endif

namespace tocl::bench::msg {

bool ViaIbverbsDevicePresent() {
#if TOCL_BENCH_WITH_VIA
  return subsystem::via::IbverbsDevicePresent();
#else
  return false;
#endif
}

}  // namespace tocl::bench::msg
