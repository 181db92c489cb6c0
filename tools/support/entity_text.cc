#include "support/entity_text.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <ctime>

namespace tocl::cli {
namespace {

std::string PidText(const Entity& entity) {
  return entity.kind == EntityKind::kProcess ? fmt::format("{}", entity.os_pid) : "-";
}

std::string StartedText(const Entity& entity) {
  return FormatUtcTime(entity.started_at);
}

}  // namespace

std::string FormatUtcTime(std::chrono::system_clock::time_point time, bool micros) {
  using std::chrono::duration_cast;
  using std::chrono::floor;
  // fmt 9 formats a time_point in local time; gmtime() keeps it UTC.
  const auto seconds = floor<std::chrono::seconds>(time);
  const std::tm utc = fmt::gmtime(std::chrono::system_clock::to_time_t(seconds));
  if (!micros) return fmt::format("{:%Y-%m-%dT%H:%M:%S}Z", utc);
  const auto fraction = duration_cast<std::chrono::microseconds>(time - seconds).count();
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:06}Z", utc, fraction);
}

std::string FormatAttributes(const Attributes& attributes) {
  std::string out;
  for (const auto& [key, value] : attributes) {
    if (!out.empty()) out += ',';
    out += key;
    out += '=';
    out += value;
  }
  return out;
}

std::string HexEncode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return out;
}

std::string FormatEndpointAddress(std::string_view address) {
  const bool printable = std::all_of(address.begin(), address.end(), [](char c) {
    return static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f;
  });
  if (printable) return std::string(address);
  return "0x" + HexEncode(address);
}

Table HostTable(std::span<const Entity> hosts) {
  Table table({"GID", "NAME", "STATE", "STARTED", "ATTRIBUTES"});
  for (const Entity& host : hosts) {
    table.AddRow({host.gid.ToString(), host.name, std::string(EntityStateName(host.state)),
                  StartedText(host), FormatAttributes(host.attributes)});
  }
  return table;
}

Table ProcessTable(std::span<const Entity> processes) {
  Table table({"GID", "NAME", "PID", "STATE", "STARTED", "ATTRIBUTES"});
  for (const Entity& process : processes) {
    table.AddRow({process.gid.ToString(), process.name, PidText(process),
                  std::string(EntityStateName(process.state)), StartedText(process),
                  FormatAttributes(process.attributes)});
  }
  return table;
}

Table ThreadTable(std::span<const Entity> threads) {
  Table table({"GID", "NAME", "STATE", "STARTED", "ATTRIBUTES"});
  for (const Entity& thread : threads) {
    table.AddRow({thread.gid.ToString(), thread.name, std::string(EntityStateName(thread.state)),
                  StartedText(thread), FormatAttributes(thread.attributes)});
  }
  return table;
}

Table EntityTable(std::span<const Entity> entities) {
  Table table({"GID", "KIND", "NAME", "PID", "STATE", "STARTED", "ATTRIBUTES"});
  for (const Entity& entity : entities) {
    table.AddRow({entity.gid.ToString(), std::string(EntityKindName(entity.kind)), entity.name,
                  PidText(entity), std::string(EntityStateName(entity.state)), StartedText(entity),
                  FormatAttributes(entity.attributes)});
  }
  return table;
}

Table EntityDetailTable(const Entity& entity) {
  const bool exited = entity.state == EntityState::kExited;
  Table table({"FIELD", "VALUE"});
  table.AddRow({"gid", entity.gid.ToString()});
  table.AddRow({"kind", std::string(EntityKindName(entity.kind))});
  if (entity.removed) {
    // A tombstone: nothing else of it is kept.
    table.AddRow({"state", "exited, removed from the directory"});
    table.AddRow({"exit reason", entity.exit_reason});
    return table;
  }
  table.AddRow({"name", entity.name});
  table.AddRow({"state", std::string(EntityStateName(entity.state))});
  if (entity.kind == EntityKind::kProcess) table.AddRow({"pid", PidText(entity)});
  table.AddRow({"started", FormatUtcTime(entity.started_at)});
  table.AddRow({"exited", exited ? FormatUtcTime(entity.exited_at) : "-"});
  table.AddRow({"exit reason", exited ? entity.exit_reason : "-"});
  if (entity.kind == EntityKind::kProcess) {
    if (entity.exit_status) table.AddRow({"exit status", fmt::format("{}", *entity.exit_status)});
    if (entity.exit_signal) table.AddRow({"exit signal", fmt::format("{}", *entity.exit_signal)});
    if (!entity.parent.is_null()) table.AddRow({"parent", entity.parent.ToString()});
  }
  if (entity.kind == EntityKind::kHost && !entity.address.empty()) {
    table.AddRow({"address", entity.address});
  }
  if (entity.attributes.empty()) table.AddRow({"attributes", "-"});
  bool first = true;
  for (const auto& [key, value] : entity.attributes) {
    table.AddRow({first ? "attributes" : "", fmt::format("{}={}", key, value)});
    first = false;
  }
  if (entity.kind == EntityKind::kProcess) {
    if (entity.endpoints.empty()) table.AddRow({"endpoints", "-"});
    first = true;
    for (const Endpoint& endpoint : entity.endpoints) {
      table.AddRow(
          {first ? "endpoints" : "",
           fmt::format("{} {}", endpoint.subsystem, FormatEndpointAddress(endpoint.address))});
      first = false;
    }
  }
  return table;
}

}  // namespace tocl::cli
