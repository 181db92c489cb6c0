// The entries of a separated list (core/split_list.h).
#include "core/split_list.h"

#include <catch2/catch.hpp>
#include <string_view>
#include <vector>

namespace tocl {
namespace {

using Entries = std::vector<std::string_view>;

TEST_CASE("a list splits at its separator, trimmed, without empty entries", "[parse]") {
  CHECK(SplitList("shm,tcp:eth0") == Entries{"shm", "tcp:eth0"});
  CHECK(SplitList("  shm , ,tcp ,") == Entries{"shm", "tcp"});
  CHECK(SplitList("").empty());
  CHECK(SplitList(" , ").empty());
  CHECK(SplitList("2=a:1;3=b:2", ';') == Entries{"2=a:1", "3=b:2"});
}

TEST_CASE("a list whose spaces are kept splits only at its separator", "[parse]") {
  CHECK(SplitList("/bin::/usr/bin:", ':', ListSpaces::kKeep) == Entries{"/bin", "/usr/bin"});
  CHECK(SplitList(" /my dir : /x", ':', ListSpaces::kKeep) == Entries{" /my dir ", " /x"});
  CHECK(SplitList(":", ':', ListSpaces::kKeep).empty());
}

}  // namespace
}  // namespace tocl
