#include "tocl/entity.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace tocl {
namespace {

constexpr std::array<std::string_view, 7> kReservedKeys = {"kind",    "name", "state", "host",
                                                           "process", "pid",  "gid"};

bool IsKeyStart(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}
bool IsKeyChar(char c) {
  return IsKeyStart(c) || (c >= '0' && c <= '9') || c == '.' || c == '-';
}

}  // namespace

std::string_view EntityKindName(EntityKind kind) {
  switch (kind) {
    case EntityKind::kHost:
      return "host";
    case EntityKind::kProcess:
      return "process";
    case EntityKind::kThread:
      return "thread";
  }
  return "unknown";
}

std::string_view EntityStateName(EntityState state) {
  switch (state) {
    case EntityState::kRunning:
      return "running";
    case EntityState::kExited:
      return "exited";
  }
  return "unknown";
}

std::string_view ChangeOpName(ChangeOp op) {
  switch (op) {
    case ChangeOp::kAdded:
      return "added";
    case ChangeOp::kUpdated:
      return "updated";
    case ChangeOp::kExited:
      return "exited";
  }
  return "unknown";
}

bool IsReservedAttributeKey(std::string_view key) {
  return std::find(kReservedKeys.begin(), kReservedKeys.end(), key) != kReservedKeys.end();
}

Status ValidateName(std::string_view what, std::string_view name) {
  if (name.empty()) return InvalidArgument(fmt::format("{} name is empty", what));
  if (name.size() > kMaxNameBytes) {
    return InvalidArgument(
        fmt::format("{} name is {} bytes long (at most {})", what, name.size(), kMaxNameBytes));
  }
  for (char c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return InvalidArgument(fmt::format("{} name contains a control character", what));
    }
  }
  return Status::Ok();
}

Status ValidateAttribute(std::string_view key, std::string_view value) {
  if (key.empty()) return InvalidArgument("attribute key is empty");
  if (key.size() > kMaxAttributeKeyBytes) {
    return InvalidArgument(fmt::format("attribute key '{:.32}...' is {} bytes long (at most {})",
                                       key, key.size(), kMaxAttributeKeyBytes));
  }
  if (!IsKeyStart(key.front()) || !std::all_of(key.begin(), key.end(), IsKeyChar)) {
    return InvalidArgument(
        fmt::format("attribute key '{}' must match [A-Za-z_][A-Za-z0-9_.-]*", key));
  }
  if (IsReservedAttributeKey(key)) {
    return InvalidArgument(fmt::format(
        "attribute key '{}' is reserved (kind, name, state, host, process, pid, gid)", key));
  }
  if (value.size() > kMaxAttributeValueBytes) {
    return InvalidArgument(fmt::format("attribute '{}' value is {} bytes long (at most {})", key,
                                       value.size(), kMaxAttributeValueBytes));
  }
  return Status::Ok();
}

}  // namespace tocl
