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

// Names and values travel in protobuf string fields, which must be UTF-8.
bool IsValidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    auto c = static_cast<unsigned char>(text[i]);
    size_t length = c < 0x80           ? 1
                    : (c >> 5) == 0x6  ? 2
                    : (c >> 4) == 0xe  ? 3
                    : (c >> 3) == 0x1e ? 4
                                       : 0;
    if (length == 0 || i + length > text.size()) return false;
    uint32_t code = length == 1 ? c : c & (0x7f >> length);
    for (size_t k = 1; k < length; ++k) {
      auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xc0) != 0x80) return false;
      code = (code << 6) | (next & 0x3f);
    }
    // Overlong forms, surrogates and code points past U+10FFFF.
    static constexpr uint32_t kMinForLength[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < kMinForLength[length] || (code >= 0xd800 && code <= 0xdfff) || code > 0x10ffff) {
      return false;
    }
    i += length;
  }
  return true;
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
    case EntityState::kUnreachable:
      return "unreachable";
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
    case ChangeOp::kUnreachable:
      return "unreachable";
    case ChangeOp::kReachable:
      return "reachable";
    case ChangeOp::kRemoved:
      return "removed";
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
  if (!IsValidUtf8(name)) return InvalidArgument(fmt::format("{} name is not valid UTF-8", what));
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
  if (!IsValidUtf8(value)) {
    return InvalidArgument(fmt::format("attribute '{}' value is not valid UTF-8", key));
  }
  return Status::Ok();
}

Status ValidateAttributes(const Attributes& attributes) {
  if (attributes.size() > kMaxAttributesPerEntity) {
    return InvalidArgument(
        fmt::format("{} attributes (at most {})", attributes.size(), kMaxAttributesPerEntity));
  }
  for (const auto& [key, value] : attributes) TOCL_RETURN_IF_ERROR(ValidateAttribute(key, value));
  return Status::Ok();
}

}  // namespace tocl
