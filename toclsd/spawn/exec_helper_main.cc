// toclsd-exec: switches to a user, then executes a program. Started by
// toclsd (as root) for spawns with `[spawn] run_as`; see exec_helper.h for
// the command line, exec_report.h for the report on descriptor 3.
//
// It runs as root with an empty environment (the dynamic loader reads no
// LD_* variable) and makes only system calls: no stdio, and no user or group
// lookups (those would load NSS modules as root); the daemon passes ids.
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <climits>
#include <vector>

#include "spawn/exec_report.h"
#include "tocl/version.h"

namespace {

using tocl::daemon::spawn::ExecReport;
using tocl::daemon::spawn::ExecStage;
using tocl::daemon::spawn::kExecReportFd;

[[noreturn]] void Fail(ExecStage stage, int error, const char* what) {
  const ExecReport report{.stage = static_cast<int32_t>(stage), .error = error};
  // Best effort: the daemon reads a short report as a failure too.
  [[maybe_unused]] const ssize_t reported = ::write(kExecReportFd, &report, sizeof(report));
  // The program's stderr is its .err log: say it there as well.
  const char* cause = ::strerror(error);
  const char* parts[] = {"toclsd-exec: ", what, ": ", cause, "\n"};
  for (const char* part : parts) {
    if (::write(STDERR_FILENO, part, ::strlen(part)) < 0) break;
  }
  ::_exit(127);
}

bool ParseId(const char* text, unsigned long* out) {
  if (text == nullptr || *text < '0' || *text > '9') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long value = ::strtoul(text, &end, 10);
  if (errno != 0 || *end != '\0' || value >= UINT_MAX) return false;
  *out = value;
  return true;
}

bool ParseGroups(const char* text, std::vector<gid_t>* groups) {
  if (*text == '\0') return true;
  const char* start = text;
  for (;;) {
    const char* comma = ::strchr(start, ',');
    char number[16] = {};
    const size_t length = comma != nullptr ? static_cast<size_t>(comma - start) : ::strlen(start);
    if (length == 0 || length >= sizeof(number)) return false;
    ::memcpy(number, start, length);
    unsigned long id = 0;
    if (!ParseId(number, &id)) return false;
    groups->push_back(static_cast<gid_t>(id));
    if (comma == nullptr) return true;
    start = comma + 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // The one argument it takes from a person (the daemon always passes 7 or more).
  if (argc == 2 && ::strcmp(argv[1], "--version") == 0) {
    static constexpr char kVersion[] = "toclsd-exec " TOCL_VERSION_STRING "\n";
    return ::write(STDOUT_FILENO, kVersion, sizeof(kVersion) - 1) < 0 ? 1 : 0;
  }
  // The report pipe must not reach the program: it closes on exec, which
  // is how the daemon learns that the exec succeeded.
  if (::fcntl(kExecReportFd, F_SETFD, FD_CLOEXEC) != 0) {
    Fail(ExecStage::kArguments, errno, "descriptor 3 (the report pipe)");
  }
  unsigned long uid = 0, gid = 0, program_argc = 0;
  std::vector<gid_t> groups;
  if (argc < 7 || !ParseId(argv[1], &uid) || !ParseId(argv[2], &gid) ||
      !ParseGroups(argv[3], &groups) || !ParseId(argv[5], &program_argc) || program_argc < 1 ||
      program_argc > static_cast<unsigned long>(argc - 6)) {
    Fail(ExecStage::kArguments, EINVAL,
         "usage: toclsd-exec UID GID GROUPS PATH ARGC ARGV... ENV...");
  }
  const char* program = argv[4];
  std::vector<char*> program_argv(argv + 6, argv + 6 + program_argc);
  program_argv.push_back(nullptr);
  std::vector<char*> program_env(argv + 6 + program_argc, argv + argc);
  program_env.push_back(nullptr);

  // Groups first, the uid last: each step needs root.
  if (::setgroups(groups.size(), groups.data()) != 0) {
    Fail(ExecStage::kSetGroups, errno, "setgroups");
  }
  if (::setresgid(static_cast<gid_t>(gid), static_cast<gid_t>(gid), static_cast<gid_t>(gid)) != 0) {
    Fail(ExecStage::kSetGid, errno, "setresgid");
  }
  if (::setresuid(static_cast<uid_t>(uid), static_cast<uid_t>(uid), static_cast<uid_t>(uid)) != 0) {
    Fail(ExecStage::kSetUid, errno, "setresuid");
  }
  uid_t ruid = 0, euid = 0, suid = 0;
  gid_t rgid = 0, egid = 0, sgid = 0;
  if (::getresuid(&ruid, &euid, &suid) != 0 || ::getresgid(&rgid, &egid, &sgid) != 0 ||
      ruid != uid || euid != uid || suid != uid || rgid != gid || egid != gid || sgid != gid) {
    Fail(ExecStage::kRegain, EPERM, "the ids did not change");
  }
  // A user other than root must not be able to go back.
  if (uid != 0 && (::setuid(0) == 0 || ::seteuid(0) == 0)) {
    Fail(ExecStage::kRegain, EPERM, "root could be regained");
  }
  if (gid != 0 && uid != 0 && ::setegid(0) == 0) {
    Fail(ExecStage::kRegain, EPERM, "group root could be regained");
  }
  ::execve(program, program_argv.data(), program_env.data());
  Fail(ExecStage::kExec, errno, program);
}
