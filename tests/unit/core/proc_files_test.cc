// Reading /proc/<pid> files and a process's start time (core/proc_files.h).
#include "core/proc_files.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <optional>
#include <string>

namespace tocl {
namespace {

// /proc/<pid>/stat with command name `comm` and start time `start` (field
// 22); the other fields as a running process has them.
std::string StatLine(const std::string& comm, const std::string& start) {
  std::string line = "4711 (" + comm + ") S 1 4711 4711 0 -1 4194560 120 0 0 0 1 2 0 0 20 0 1 0 ";
  line += start;
  line +=
      " 2461696 228 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
  return line;
}

TEST_CASE("the start time is field 22 of stat, counted after the command name", "[proc]") {
  CHECK(ParseStartTicks(StatLine("sleep", "98765")) == 98765u);
  // A command name may hold spaces and parentheses: only its last ')' ends it.
  CHECK(ParseStartTicks(StatLine("a b", "98765")) == 98765u);
  CHECK(ParseStartTicks(StatLine("x) S 1 2 3 (y", "98765")) == 98765u);
  CHECK(ParseStartTicks(StatLine(")) ((", "12")) == 12u);
  CHECK(ParseStartTicks(StatLine("", "7")) == 7u);
}

TEST_CASE("a stat line without a start time, or with a malformed one, gives none", "[proc]") {
  CHECK_FALSE(ParseStartTicks("").has_value());
  CHECK_FALSE(ParseStartTicks("4711 (sleep S 1 2 3").has_value());  // no ')'
  CHECK_FALSE(ParseStartTicks("4711 (sleep) S 1 4711 4711 0 -1 4194560").has_value());
  CHECK_FALSE(ParseStartTicks(StatLine("sleep", "9x8")).has_value());
  CHECK_FALSE(ParseStartTicks(StatLine("sleep", "-5")).has_value());
  CHECK_FALSE(ParseStartTicks(StatLine("sleep", "99999999999999999999999")).has_value());
}

TEST_CASE("this process's own stat has a start time", "[proc]") {
  const std::optional<std::string> stat = ReadProcFile(::getpid(), "stat");
  REQUIRE(stat.has_value());
  const std::optional<uint64_t> ticks = ParseStartTicks(*stat);
  REQUIRE(ticks.has_value());
  CHECK(*ticks > 0u);
  CHECK(ProcessStartTicks(::getpid()) == ticks);
}

TEST_CASE("the files of a process that does not exist cannot be read", "[proc]") {
  // Above the largest pid Linux hands out (pid_max is at most 2^22).
  CHECK_FALSE(ReadProcFile(1 << 23, "status").has_value());
  CHECK_FALSE(ProcessStartTicks(1 << 23).has_value());
}

}  // namespace
}  // namespace tocl
