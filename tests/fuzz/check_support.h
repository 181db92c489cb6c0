// What the check functions (fuzz_checks.h) share: turning a broken property
// into a Status, and showing bytes in messages.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "tocl/status.h"

namespace tocl::fuzz {

// "query_parser_check.cc:42: property broken: reparsed.ok() (reparse: ...)".
inline Status Broken(std::string_view condition, std::string_view file, int line,
                     std::string_view details) {
  const size_t slash = file.rfind('/');
  if (slash != std::string_view::npos) file.remove_prefix(slash + 1);
  return Internal(fmt::format("{}:{}: property broken: {}{}{}", file, line, condition,
                              details.empty() ? "" : " -- ", details));
}

// Bytes as text for a message: printable ASCII as is, the rest as \xNN,
// cut after `limit` bytes so that a 4 KiB input stays readable.
inline std::string Escaped(std::string_view bytes, size_t limit = 200) {
  std::string out;
  for (size_t i = 0; i < bytes.size() && i < limit; ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (bytes.size() > limit) out += fmt::format("... ({} bytes)", bytes.size());
  return out;
}

inline std::string_view AsText(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

}  // namespace tocl::fuzz

// Returns Internal from the enclosing check function when `cond` is false;
// optional fmt arguments add the values involved:
//   TOCL_FUZZ_EXPECT(again == text, "'{}' != '{}'", Escaped(again), Escaped(text));
#define TOCL_FUZZ_EXPECT(cond, ...)                                                          \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      return ::tocl::fuzz::Broken(#cond, __FILE__, __LINE__, ::fmt::format("" __VA_ARGS__)); \
    }                                                                                        \
  } while (0)
