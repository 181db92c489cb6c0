#include "runtime/entry_registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>

namespace tocl {
namespace {

bool IsNameStart(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}
bool IsNameChar(char c) {
  return IsNameStart(c) || (c >= '0' && c <= '9') || c == '.' || c == ':' || c == '-';
}

struct Registry {
  std::mutex mu;
  std::map<std::string, Entry, std::less<>> entries;  // guarded by mu
};

// Built on first use (no static initialisation order to get wrong), never
// destroyed: entry threads may outlive main's statics.
Registry& TheRegistry() {
  static Registry* registry = new Registry();
  return *registry;
}

}  // namespace

Status ValidateEntryName(std::string_view name) {
  if (name.empty()) return InvalidArgument("entry name is empty");
  if (name.size() > kMaxEntryNameBytes) {
    return InvalidArgument(fmt::format("entry name '{:.32}...' is {} bytes long (at most {})", name,
                                       name.size(), kMaxEntryNameBytes));
  }
  if (!IsNameStart(name.front()) || !std::all_of(name.begin(), name.end(), IsNameChar)) {
    // Printed escaped: the name may hold anything.
    return InvalidArgument(
        fmt::format("entry name {:?} must match [A-Za-z_][A-Za-z0-9_.:-]*", std::string(name)));
  }
  return Status::Ok();
}

Status register_entry(std::string name, Entry fn) {
  TOCL_RETURN_IF_ERROR(ValidateEntryName(name));
  if (!fn) return InvalidArgument(fmt::format("entry '{}' has no function", name));
  Registry& registry = TheRegistry();
  std::lock_guard lock(registry.mu);
  auto [it, added] = registry.entries.try_emplace(name, std::move(fn));
  if (!added) return AlreadyExists(fmt::format("an entry named '{}' is already registered", name));
  return Status::Ok();
}

namespace runtime {

std::optional<Entry> FindEntry(std::string_view name) {
  Registry& registry = TheRegistry();
  std::lock_guard lock(registry.mu);
  auto it = registry.entries.find(name);
  if (it == registry.entries.end()) return std::nullopt;
  return it->second;
}

std::string EntryNames(size_t max_bytes) {
  Registry& registry = TheRegistry();
  std::lock_guard lock(registry.mu);
  if (registry.entries.empty()) return "none";
  std::string names;
  for (const auto& [name, fn] : registry.entries) {
    if (!names.empty()) names += ", ";
    if (names.size() + name.size() > max_bytes) {
      names += "...";
      break;
    }
    names += name;
  }
  return names;
}

}  // namespace runtime
}  // namespace tocl
