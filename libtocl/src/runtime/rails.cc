#include "runtime/rails.h"

#include <fmt/format.h>

#include <algorithm>

#include "buffers/size_class.h"

namespace tocl::runtime {

uint64_t Rail::frames_received() const {
  uint64_t sum = 0;
  for (const FrameCount& count : received_) sum += count.frames.load(std::memory_order_relaxed);
  return sum;
}

uint64_t Rail::bytes_received() const {
  uint64_t sum = 0;
  for (const FrameCount& count : received_) sum += count.bytes.load(std::memory_order_relaxed);
  return sum;
}

Status Rails::Open(std::string_view list, const Context& context, const MakeSink& make_sink) {
  num_classes_ = context.num_classes;
  const subsystem::TransportRegistry& transports = subsystem::CompiledTransports();
  TOCL_ASSIGN_OR_RETURN(std::vector<subsystem::NetworkSpec> specs,
                        transports.ParseNetworks(list, /*loopback_only=*/context.key.none()));
  for (const subsystem::NetworkSpec& spec : specs) {
    TOCL_RETURN_IF_ERROR(
        OpenRail(spec, context, make_sink).WithContext(fmt::format("open network {}", spec.name)));
  }
  // The rails are fixed from here on, and so is what is chosen among them.
  for (const subsystem::Transport& transport : transports.transports()) {
    auto rail = std::find_if(rails_.begin(), rails_.end(),
                             [&](const auto& open) { return open->transport == &transport; });
    if (rail != rails_.end()) {
      fastest_ = (*rail)->subsystem.get();
      break;
    }
  }
  post_copy_ = std::any_of(rails_.begin(), rails_.end(),
                           [](const auto& rail) { return rail->transport->post_copy; });
  return Status::Ok();
}

Status Rails::OpenRail(const subsystem::NetworkSpec& spec, const Context& context,
                       const MakeSink& make_sink) {
  auto rail = std::make_unique<Rail>();
  rail->spec = spec;
  TOCL_ASSIGN_OR_RETURN(rail->transport, subsystem::CompiledTransports().Find(spec.kind));
  rail->sink = make_sink(static_cast<int>(rails_.size()));
  TOCL_ASSIGN_OR_RETURN(subsystem::OpenNetwork network,
                        rail->transport->open(spec, subsystem::OpenContext{
                                                        .self_process = context.self_process,
                                                        .num_classes = context.num_classes,
                                                        .options = context.options,
                                                        .key = context.key,
                                                        .reactor = context.reactor,
                                                        .sink = *rail->sink,
                                                        .budget = context.budget,
                                                    }));
  rail->subsystem = std::move(network.subsystem);
  rail->published = std::move(network.published);
  rail->add_stats = std::move(network.add_stats);
  rails_.push_back(std::move(rail));
  return Status::Ok();
}

void Rails::Close() {
  for (auto& rail : rails_) rail->subsystem->Close();
}

subsystem::Subsystem* Rails::SubsystemFor(Network network) const {
  if (network == Network::kFastest) return fastest_;
  for (auto& rail : rails_) {
    if (rail->transport->network == network) return rail->subsystem.get();
  }
  return nullptr;
}

Result<Buffer> Rails::GetBuffer(size_t size, Network network, AtCap at_cap,
                                std::chrono::steady_clock::time_point deadline) const {
  subsystem::Subsystem* subsystem = SubsystemFor(network);
  if (subsystem == nullptr) {
    return InvalidArgument(
        fmt::format("network {} is not enabled in this process", NetworkName(network)));
  }
  const uint32_t class_index = buffers::ClassFor(size);
  if (class_index >= num_classes_) {
    return InvalidArgument(fmt::format(
        "a {} byte buffer is larger than the short maximum of {} bytes (header included)", size,
        buffers::ClassBytes(num_classes_ - 1)));
  }
  TOCL_ASSIGN_OR_RETURN(detail::BufferSlot * slot,
                        subsystem->pool().Get(class_index, at_cap, deadline));
  slot->header().length = static_cast<uint32_t>(size);
  return Buffer(slot);
}

std::vector<PoolClassStats> Rails::PoolStats() const {
  std::vector<PoolClassStats> stats;
  for (auto& rail : rails_) {
    auto more = rail->subsystem->pool().Stats();
    for (auto& entry : more) entry.network = rail->spec.name;
    stats.insert(stats.end(), more.begin(), more.end());
  }
  return stats;
}

std::vector<NetworkStats> Rails::Stats() const {
  std::vector<NetworkStats> out;
  for (auto& rail : rails_) {
    NetworkStats stats;
    stats.name = rail->spec.name;
    stats.kind = rail->spec.kind;
    stats.device = rail->spec.device;
    stats.address = rail->published;
    stats.frames_received = rail->frames_received();
    stats.bytes_received = rail->bytes_received();
    stats.failures = rail->failures.load(std::memory_order_relaxed);
    if (rail->add_stats) rail->add_stats(stats);
    out.push_back(std::move(stats));
  }
  return out;
}

}  // namespace tocl::runtime
