// Owning handles for the rdma-core objects the ibverbs provider creates:
// unique_ptrs whose deleter is the object's destroy call, so members
// declared in setup order are torn down in reverse (rdma-core's examples,
// without their goto ladders).
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <memory>

namespace tocl::subsystem::via::verbs {

template <auto kDestroy>
struct Destroy {
  template <typename T>
  void operator()(T* object) const {
    (void)kDestroy(object);
  }
};

using EventChannel = std::unique_ptr<rdma_event_channel, Destroy<rdma_destroy_event_channel>>;
// A cm id must have no QP and no unacked events left when it is destroyed.
using CmId = std::unique_ptr<rdma_cm_id, Destroy<rdma_destroy_id>>;
using ProtectionDomain = std::unique_ptr<ibv_pd, Destroy<ibv_dealloc_pd>>;
using CompChannel = std::unique_ptr<ibv_comp_channel, Destroy<ibv_destroy_comp_channel>>;
// Waits for every completion event taken from its channel to be acked.
using CompletionQueue = std::unique_ptr<ibv_cq, Destroy<ibv_destroy_cq>>;
using MemoryRegion = std::unique_ptr<ibv_mr, Destroy<ibv_dereg_mr>>;

}  // namespace tocl::subsystem::via::verbs
