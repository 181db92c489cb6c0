// A whole text as a number (core/parse_number.h).
#include "core/parse_number.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <string_view>

namespace tocl {
namespace {

TEST_CASE("a number is the whole text, in range for its type", "[parse]") {
  CHECK(ParseNumber<int>("24") == 24);
  CHECK(ParseNumber<int>("-3") == -3);
  CHECK(ParseNumber<uint16_t>("ffff", 16) == 0xffff);
  CHECK(ParseNumber<uint64_t>("18446744073709551615") == UINT64_MAX);
  for (std::string_view text : {"", " 1", "1 ", "24x", "0x10", "+1"}) {
    INFO(text);
    CHECK_FALSE(ParseNumber<int>(text).has_value());
  }
  CHECK_FALSE(ParseNumber<uint32_t>("-1").has_value());     // no sign
  CHECK_FALSE(ParseNumber<uint16_t>("65536").has_value());  // overflow
  CHECK_FALSE(ParseNumber<uint16_t>("10000", 16).has_value());
}

}  // namespace
}  // namespace tocl
