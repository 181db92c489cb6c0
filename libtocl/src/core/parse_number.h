// A number that must be the whole of a text: an option, an environment
// variable, a field of a /proc file or of a list entry.
#pragma once

#include <charconv>
#include <optional>
#include <string_view>
#include <system_error>

namespace tocl {

// `text`, all of it, as a number in `base`. nullopt for an empty text, a
// sign where `Number` has none, trailing characters or an overflow.
//
//   ParseNumber<int>("24") == 24;  ParseNumber<int>("24x") == nullopt
template <typename Number>
std::optional<Number> ParseNumber(std::string_view text, int base = 10) {
  Number value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
}

}  // namespace tocl
