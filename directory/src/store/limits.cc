#include "store/limits.h"

#include <fmt/format.h>

#include <set>

namespace tocl::directory {

Status ValidateAttributes(
    const google::protobuf::RepeatedPtrField<tocl::directory::v1::Attribute>& attributes) {
  if (static_cast<size_t>(attributes.size()) > kMaxAttributesPerEntity) {
    return InvalidArgument(fmt::format("{} attributes (at most {} per entity)", attributes.size(),
                                       kMaxAttributesPerEntity));
  }
  std::set<std::string_view> keys;
  for (const auto& attribute : attributes) {
    TOCL_RETURN_IF_ERROR(ValidateAttribute(attribute.key(), attribute.value()));
    if (!keys.insert(attribute.key()).second) {
      return InvalidArgument(fmt::format("attribute key '{}' appears twice", attribute.key()));
    }
  }
  return Status::Ok();
}

Status ValidateEndpoint(const tocl::directory::v1::Endpoint& endpoint) {
  const std::string& name = endpoint.subsystem();
  if (name.empty() || name.size() > kMaxSubsystemNameBytes) {
    return InvalidArgument(
        fmt::format("subsystem name must be 1 to {} bytes", kMaxSubsystemNameBytes));
  }
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == ':';
    if (!ok) {
      return InvalidArgument(fmt::format("subsystem name '{}' must match [a-z0-9_:-]+", name));
    }
  }
  if (endpoint.address().size() > kMaxEndpointAddressBytes) {
    return InvalidArgument(fmt::format("endpoint address is {} bytes (at most {})",
                                       endpoint.address().size(), kMaxEndpointAddressBytes));
  }
  return Status::Ok();
}

std::string CleanExitReason(std::string_view reason) {
  if (reason.empty()) return "exited normally";
  if (reason.size() > kMaxNameBytes) {
    size_t cut = kMaxNameBytes;
    // Back off continuation bytes (10xxxxxx) so no character is split.
    while (cut > 0 && (static_cast<unsigned char>(reason[cut]) & 0xc0) == 0x80) --cut;
    reason = reason.substr(0, cut);
  }
  if (!ValidateName("exit reason", reason).ok()) return "exited (its reason was not valid text)";
  return std::string(reason);
}

}  // namespace tocl::directory
