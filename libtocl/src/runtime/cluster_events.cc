// What the directory's change stream means for the runtime beyond exits
// (runtime.cc's OnExited): hosts that go down and come back, exit
// notifications, and SpawnThread calls that will get no reply.
#include <fmt/format.h>

#include <cstring>

#include "core/logger.h"
#include "runtime/notifier.h"
#include "runtime/runtime_impl.h"
#include "runtime/thread_service.h"

namespace tocl {

using runtime::SendQueue;

void Runtime::Impl::OnChange(const ChangeEvent& event) {
  switch (event.op) {
    case ChangeOp::kExited:
      if (event.gid.is_process()) {
        spawn_service->FailPending(event.gid, FailedPrecondition(fmt::format(
                                                  "process {} has exited ({})",
                                                  event.gid.ToString(), event.entity.exit_reason)));
      }
      break;
    case ChangeOp::kUnreachable:
      if (event.gid.is_host()) OnHostUnreachable(event.gid);
      break;
    case ChangeOp::kReachable:
      if (event.gid.is_host()) OnHostReachable(event.gid);
      break;
    default:
      break;
  }
  notifier->OnChange(event);
}

Status Runtime::Impl::HostDownStatus(Gid host) const {
  if (down_host_count.load(std::memory_order_acquire) == 0) return Status::Ok();
  std::lock_guard lock(hosts_mu);
  if (down_hosts.count(host.host_index()) == 0) return Status::Ok();
  return Unavailable(runtime::HostDownReason(host.host()));
}

Status Runtime::Impl::UnreachableStatus(const Entity& entity) const {
  if (entity.state != EntityState::kUnreachable) return Status::Ok();
  return Unavailable(runtime::HostDownReason(entity.gid.host()));
}

void Runtime::Impl::OnHostUnreachable(Gid host) {
  {
    std::lock_guard lock(hosts_mu);
    if (down_hosts.insert(host.host_index()).second) {
      down_host_count.store(down_hosts.size(), std::memory_order_release);
    }
  }
  const Status why = Unavailable(runtime::HostDownReason(host));
  Log().warn("tocl: {}: failing sends to its processes", why.message());
  {
    std::shared_lock lock(dest_mu);
    for (auto& [raw, peer] : peers) {
      if (peer->process().host() != host) continue;
      std::lock_guard peer_lock(peer->mu());
      if (peer->state() == SendQueue::State::kFailed) continue;  // exited: stays so
      peer->Fail(why, /*host_down=*/true);
    }
  }
  spawn_service->FailPending(host, why);
}

void Runtime::Impl::OnHostReachable(Gid host) {
  {
    std::lock_guard lock(hosts_mu);
    down_hosts.erase(host.host_index());
    down_host_count.store(down_hosts.size(), std::memory_order_release);
  }
  Log().info("tocl: host {} answers again", host.ToString());
  // The next send looks its peers up and connects again. Their sequence
  // numbers go on: a process that lived through the outage keeps its order.
  std::shared_lock lock(dest_mu);
  for (auto& [raw, peer] : peers) {
    if (peer->process().host() != host) continue;
    std::lock_guard peer_lock(peer->mu());
    (void)peer->ResetAfterHostDown();
  }
}

Status Runtime::Impl::DeliverNotice(Gid self, Gid source, Tag tag,
                                    std::span<const std::byte> payload) {
  subsystem::Subsystem* subsystem = SubsystemFor(Network::kFastest);
  if (subsystem == nullptr) return Unavailable("no network is open");
  const uint32_t class_index = buffers::ClassFor(payload.size());
  if (class_index >= num_classes) {
    return InvalidArgument(fmt::format("a {} byte notice does not fit a message", payload.size()));
  }
  // Bounded: the notification thread must not wait for ever at the pool cap.
  TOCL_ASSIGN_OR_RETURN(
      detail::BufferSlot * got,
      subsystem->pool().Get(class_index, AtCap::kWait,
                            std::chrono::steady_clock::now() + std::chrono::seconds(1)));
  buffers::SlotRef slot(got);
  slot->header() = wire::MessageHeader(source, self, tag, static_cast<uint32_t>(payload.size()));
  if (!payload.empty()) std::memcpy(slot->payload(), payload.data(), payload.size());
  return DeliverLocal(slot);  // an error drops `slot`
}

}  // namespace tocl
