#include "json_output.h"

#include <string>

#include "support/entity_text.h"

namespace tocl::cli {

nlohmann::json EntityToJson(const Entity& entity) {
  const bool exited = entity.state == EntityState::kExited;
  nlohmann::json endpoints = nlohmann::json::array();
  for (const Endpoint& endpoint : entity.endpoints) {
    endpoints.push_back(
        {{"subsystem", endpoint.subsystem}, {"address", HexEncode(endpoint.address)}});
  }
  nlohmann::json attributes = nlohmann::json::object();
  for (const auto& [key, value] : entity.attributes) attributes[key] = value;
  auto optional_int = [](const std::optional<int>& value) {
    return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
  };
  const bool is_process = entity.kind == EntityKind::kProcess;
  nlohmann::json out = {
      {"gid", entity.gid.ToString()},
      {"kind", EntityKindName(entity.kind)},
      {"name", entity.name},
      {"state", EntityStateName(entity.state)},
      {"pid", entity.kind == EntityKind::kProcess ? nlohmann::json(entity.os_pid) : nullptr},
      {"attributes", std::move(attributes)},
      {"endpoints", std::move(endpoints)},
      {"started_at", FormatUtcTime(entity.started_at, /*micros=*/true)},
      {"exited_at", exited ? nlohmann::json(FormatUtcTime(entity.exited_at, true)) : nullptr},
      {"exit_reason", entity.exit_reason},
  };
  if (is_process) {
    out["exit_status"] = optional_int(entity.exit_status);
    out["exit_signal"] = optional_int(entity.exit_signal);
    out["parent"] = entity.parent.is_null() ? nlohmann::json(nullptr)
                                            : nlohmann::json(entity.parent.ToString());
  }
  if (entity.kind == EntityKind::kHost) out["address"] = entity.address;
  // A tombstone: the entity exited and was removed from the directory.
  if (entity.removed) out["removed"] = true;
  return out;
}

nlohmann::json ChangeEventToJson(const ChangeEvent& event) {
  nlohmann::json out = EntityToJson(event.entity);
  out["gid"] = event.gid.ToString();
  out["seq"] = event.seq;
  out["op"] = ChangeOpName(event.op);
  out["at"] = FormatUtcTime(event.at, /*micros=*/true);
  return out;
}

nlohmann::json PoolStatsToJson(const ProcessPoolStats& stats) {
  nlohmann::json classes = nlohmann::json::array();
  for (const PoolClassStats& pool : stats.classes) {
    classes.push_back({
        {"network", pool.network},
        {"class_bytes", pool.class_bytes},
        {"in_use", pool.in_use},
        {"free", pool.free},
        {"provided", pool.provided},
        {"grown", pool.grown},
        {"bytes_registered", pool.bytes_registered},
    });
  }
  return {
      {"process", stats.process.ToString()},
      {"reported_at", FormatUtcTime(stats.reported_at, /*micros=*/true)},
      {"classes", std::move(classes)},
  };
}

nlohmann::json NetworkStatsToJson(const ProcessNetworkStats& stats) {
  nlohmann::json networks = nlohmann::json::array();
  for (const NetworkStats& network : stats.networks) {
    nlohmann::json peers = nlohmann::json::array();
    for (const NetworkPeerStats& peer : network.peers) {
      peers.push_back({
          {"peer", peer.peer.ToString()},
          {"bandwidth", peer.bandwidth > 0 ? nlohmann::json(peer.bandwidth) : nullptr},
          {"fragments_sent", peer.fragments_sent},
          {"fragments_resent", peer.fragments_resent},
          {"failed", peer.failed},
      });
    }
    nlohmann::json vis = nlohmann::json::array();
    for (const ViStats& vi : network.vis) {
      vis.push_back({
          {"peer", vi.peer.ToString()},
          {"class_bytes", vi.class_bytes},
          {"state", vi.state},
          {"posted", vi.posted},
          {"credits", vi.credits},
          {"queued", vi.queued},
          {"sent", vi.sent},
          {"received", vi.received},
      });
    }
    networks.push_back({
        {"name", network.name},
        {"kind", network.kind},
        {"device", network.device},
        {"address", HexEncode(network.address)},
        {"frames_sent", network.frames_sent},
        {"bytes_sent", network.bytes_sent},
        {"frames_received", network.frames_received},
        {"bytes_received", network.bytes_received},
        {"failures", network.failures},
        {"peers", std::move(peers)},
        {"provider", network.provider},
        {"vi_cap", network.vi_cap},
        {"vis_opened", network.vis_opened},
        {"vis_closed", network.vis_closed},
        {"vis", std::move(vis)},
    });
  }
  return {
      {"process", stats.process.ToString()},
      {"reported_at", FormatUtcTime(stats.reported_at, /*micros=*/true)},
      {"networks", std::move(networks)},
  };
}

void PrintJsonLine(const nlohmann::json& value, std::FILE* out) {
  std::string line = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), out);
}

}  // namespace tocl::cli
