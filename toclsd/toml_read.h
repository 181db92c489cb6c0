// Reading toclsd.toml values with errors that name the file and line: shared
// by config.cc and spawn_config.cc.
#pragma once

#include <fmt/format.h>
#include <toml++/toml.h>

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "tocl/status.h"

namespace tocl::daemon {

// "FILE:LINE" of a node.
inline std::string Where(const toml::node& node, std::string_view source) {
  return fmt::format("{}:{}", source, node.source().begin.line);
}

// table[key] into `out` when present. The error calls the setting `name`
// (default: the key) and adds `expected` (e.g. " (a string)").
template <typename T>
Status Read(const toml::table& table, std::string_view key, std::string_view source, T& out,
            std::string_view name = {}, std::string_view expected = {}) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return Status::Ok();
  // value_exact: no silent conversions (a boolean is not a cache size); a
  // floating-point setting also takes a whole number.
  std::optional<T> value;
  if constexpr (std::is_floating_point_v<T>) {
    value = node->is_integer() ? std::optional<T>(static_cast<T>(*node->value_exact<int64_t>()))
                               : node->value_exact<T>();
  } else {
    value = node->value_exact<T>();
  }
  if (!value) {
    return InvalidArgument(fmt::format("{}: '{}' has the wrong type{}", Where(*node, source),
                                       name.empty() ? key : name, expected));
  }
  out = *value;
  return Status::Ok();
}

}  // namespace tocl::daemon
