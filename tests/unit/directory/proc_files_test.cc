#include "service/proc_files.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tocl::directory {
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
}

constexpr const char* kStatus =
    "Name:\tsleep\n"
    "Umask:\t0022\n"
    "State:\tS (sleeping)\n"
    "Tgid:\t4711\n"
    "NStgid:\t4711\t12\t1\n"
    "Pid:\t4711\n"
    "PPid:\t1\n"
    "Uid:\t1000\t1001\t1002\t1003\n"
    "Gid:\t100\t100\t100\t100\n"
    "NSpid:\t4711\t12\t1\n"
    "NSpgid:\t4711\t12\t1\n";

TEST_CASE("the Uid line gives the real, effective and saved uids", "[proc]") {
  const std::optional<ProcessUids> uids = ParseUids(kStatus);
  REQUIRE(uids.has_value());
  CHECK(uids->real == 1000u);
  CHECK(uids->effective == 1001u);
  CHECK(uids->saved == 1002u);
}

TEST_CASE("a status without a well-formed Uid line gives no uids", "[proc]") {
  CHECK_FALSE(ParseUids("").has_value());
  CHECK_FALSE(ParseUids("Name:\tsleep\nGid:\t1\t1\t1\t1\n").has_value());
  CHECK_FALSE(ParseUids("Uid:\t1000\t1001\n").has_value());               // too few
  CHECK_FALSE(ParseUids("Uid:\t1000\tx\t1002\t1003\n").has_value());      // not a number
  CHECK_FALSE(ParseUids("Uid:\t10-00\t1001\t1002\t1003\n").has_value());  // trailing text
  CHECK_FALSE(ParseUids("Uid:\t-1\t1001\t1002\t1003\n").has_value());
  // Another key that starts with "Uid" is not the line.
  CHECK_FALSE(ParseUids("Uidx:\t1\t2\t3\t4\n").has_value());
}

TEST_CASE("the NSpid line gives the pid in each namespace, the process's own last", "[proc]") {
  const std::optional<std::vector<pid_t>> pids = ParseNamespacePids(kStatus);
  REQUIRE(pids.has_value());
  CHECK(*pids == std::vector<pid_t>{4711, 12, 1});
  CHECK(ParseNamespacePids("NSpid:\t4711\n") == std::vector<pid_t>{4711});
  // Not taken from NStgid or NSpgid (earlier and later lines).
  CHECK(ParseNamespacePids("NStgid:\t5\t6\nNSpid:\t7\t8\n") == std::vector<pid_t>{7, 8});
}

TEST_CASE("a status without a well-formed NSpid line gives no namespace pids", "[proc]") {
  CHECK_FALSE(ParseNamespacePids("").has_value());
  CHECK_FALSE(ParseNamespacePids("Pid:\t4711\nNStgid:\t4711\t1\n").has_value());  // Linux < 4.1
  CHECK_FALSE(ParseNamespacePids("NSpid:\n").has_value());
  CHECK_FALSE(ParseNamespacePids("NSpid:\t\n").has_value());
  CHECK_FALSE(ParseNamespacePids("NSpid:\t4711\t0\n").has_value());
  CHECK_FALSE(ParseNamespacePids("NSpid:\t4711\t-3\n").has_value());
  CHECK_FALSE(ParseNamespacePids("NSpid:\t4711\tabc\n").has_value());
}

TEST_CASE("this process's own NSpid ends with its pid", "[proc]") {
  const std::optional<std::string> status = ReadProcFile(::getpid(), "status");
  REQUIRE(status.has_value());
  const std::optional<std::vector<pid_t>> pids = ParseNamespacePids(*status);
  REQUIRE(pids.has_value());
  CHECK(pids->back() == ::getpid());
  const std::optional<ProcessUids> uids = ParseUids(*status);
  REQUIRE(uids.has_value());
  CHECK(uids->effective == ::geteuid());
}

TEST_CASE("the files of a process that does not exist cannot be read", "[proc]") {
  // Above the largest pid Linux hands out (pid_max is at most 2^22).
  CHECK_FALSE(ReadProcFile(1 << 23, "status").has_value());
}

}  // namespace
}  // namespace tocl::directory
