// What the daemon reads of /proc/<pid>/status (service/proc_files.h).
#include "service/proc_files.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/proc_files.h"

namespace tocl::directory {
namespace {

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

}  // namespace
}  // namespace tocl::directory
