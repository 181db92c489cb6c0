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
  return {
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
}

nlohmann::json ChangeEventToJson(const ChangeEvent& event) {
  nlohmann::json out = EntityToJson(event.entity);
  out["gid"] = event.gid.ToString();
  out["seq"] = event.seq;
  out["op"] = ChangeOpName(event.op);
  out["at"] = FormatUtcTime(event.at, /*micros=*/true);
  return out;
}

void PrintJsonLine(const nlohmann::json& value, std::FILE* out) {
  std::string line = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), out);
}

}  // namespace tocl::cli
