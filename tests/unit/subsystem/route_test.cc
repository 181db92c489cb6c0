// Route::PostRef: the raw Post contract ("not taken on error, the reference
// is still the caller's") over an owned SlotRef, with errors injected.
#include <catch2/catch.hpp>
#include <deque>
#include <span>

#include "buffers/buffer_pool.h"
#include "buffers/slot_ref.h"
#include "subsystem/subsystem.h"

namespace tocl::subsystem {
namespace {

constexpr size_t kMiB = 1024 * 1024;

// Takes frames while `next` is Ok, as a subsystem does, and finishes them
// (kSent, its reference dropped) on Finish.
class ScriptedRoute final : public Route {
 public:
  Status Post(detail::BufferSlot* slot) override {
    Status status = next;
    if (status.ok()) taken.push_back(slot);
    return status;
  }
  Status PostCopy(const wire::Header&, std::span<const std::byte>) override {
    return Status(StatusCode::kUnimplemented, "no copy path");
  }
  bool Drained() const override { return taken.empty(); }
  bool Broken() const override { return false; }

  void Finish() {
    for (detail::BufferSlot* slot : taken) {
      slot->set_state(BufferState::kSent);
      slot->pool->Unref(slot);
    }
    taken.clear();
  }

  Status next;
  std::deque<detail::BufferSlot*> taken;
};

TEST_CASE("a frame a route does not take stays with the sender and returns to its pool",
          "[route]") {
  buffers::AnonymousSlabMemory memory;
  buffers::PoolBudget budget(4 * kMiB);
  buffers::BufferPool pool(Network::kTcp, 4, memory, budget);
  auto in_use = [&] { return pool.Stats().at(0).in_use; };
  ScriptedRoute route;

  buffers::SlotRef frame(pool.TryGet(0));
  detail::BufferSlot* slot = frame.get();
  route.next = Status(StatusCode::kTryAgain, "no room");
  CHECK(route.PostRef(frame).code() == StatusCode::kTryAgain);
  CHECK(frame.get() == slot);  // still ours: retry after progress
  CHECK(slot->refs.load() == 1);
  route.next = Status::Ok();
  CHECK(route.PostRef(frame).ok());
  CHECK(!frame);  // the route's now
  CHECK(slot->refs.load() == 1);
  CHECK(in_use() == 1);
  route.Finish();
  CHECK(in_use() == 0);

  // A broken route: the sender drops the frame (by letting it go).
  {
    buffers::SlotRef lost(pool.TryGet(0));
    route.next = Unavailable("the peer is gone");
    CHECK(route.PostRef(lost).code() == StatusCode::kUnavailable);
    CHECK(static_cast<bool>(lost));
    CHECK(in_use() == 1);
  }
  CHECK(in_use() == 0);

  // A Buffer kept by its owner while the runtime sends a shared reference.
  buffers::SlotRef owner(pool.TryGet(0));
  route.next = Status::Ok();
  buffers::SlotRef shared = owner.Share();
  CHECK(route.PostRef(shared).ok());
  CHECK(owner->refs.load() == 2);
  route.Finish();
  CHECK(owner->refs.load() == 1);
  owner.reset();
  CHECK(in_use() == 0);
}

}  // namespace
}  // namespace tocl::subsystem
