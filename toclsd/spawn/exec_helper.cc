#include "spawn/exec_helper.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace tocl::daemon::spawn {

Result<std::string> FindExecHelper() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return Internal(fmt::format("cannot find toclsd's own path: {}", error.message()));
  const std::string helper = (self.parent_path() / kExecHelperName).string();
  struct stat info {};
  if (::stat(helper.c_str(), &info) != 0) {
    return FailedPrecondition(fmt::format(
        "spawn run_as needs {} next to toclsd, to switch users; {}: {} (install it with toclsd)",
        kExecHelperName, helper, std::strerror(errno)));
  }
  // The daemon runs it as root: whoever could replace it would be root.
  if (!S_ISREG(info.st_mode) || (info.st_mode & S_IXUSR) == 0) {
    return FailedPrecondition(fmt::format("{} is not an executable file", helper));
  }
  if (info.st_uid != 0 && info.st_uid != ::geteuid()) {
    return FailedPrecondition(
        fmt::format("{} belongs to uid {}; toclsd runs it as root, so it must belong to root",
                    helper, info.st_uid));
  }
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return FailedPrecondition(
        fmt::format("{} can be written by others (mode {:04o}); toclsd runs it as root", helper,
                    info.st_mode & 07777));
  }
  return helper;
}

std::vector<std::string> ExecHelperArgs(const std::string& helper, const RunAs& identity,
                                        const std::string& program,
                                        const std::vector<std::string>& argv,
                                        const std::vector<std::string>& env) {
  std::vector<std::string> args = {helper,
                                   std::to_string(identity.uid),
                                   std::to_string(identity.gid),
                                   fmt::format("{}", fmt::join(identity.groups, ",")),
                                   program,
                                   std::to_string(argv.size())};
  args.insert(args.end(), argv.begin(), argv.end());
  args.insert(args.end(), env.begin(), env.end());
  return args;
}

ExecReport ReadExecReport(const Fd& read_end) {
  ExecReport report;
  char* bytes = reinterpret_cast<char*>(&report);
  size_t filled = 0;
  while (filled < sizeof(report)) {
    const ssize_t n = ::read(read_end.get(), bytes + filled, sizeof(report) - filled);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    filled += static_cast<size_t>(n);
  }
  // End of file at once: the pipe closed on exec.
  if (filled == 0) return ExecReport{};
  if (filled < sizeof(report)) {
    return ExecReport{.stage = static_cast<int32_t>(ExecStage::kArguments), .error = EPIPE};
  }
  return report;
}

Status DescribeExecFailure(const ExecReport& report, const RunAs& identity) {
  const std::string cause = std::strerror(report.error);
  switch (static_cast<ExecStage>(report.stage)) {
    case ExecStage::kSetGroups:
      return PermissionDenied(
          fmt::format("cannot set the groups of {}: setgroups: {}", identity.Describe(), cause));
    case ExecStage::kSetGid:
      return PermissionDenied(
          fmt::format("cannot switch to group {}: setresgid: {}", identity.gid, cause));
    case ExecStage::kSetUid:
      return PermissionDenied(
          fmt::format("cannot switch to user {}: setresuid: {}", identity.Describe(), cause));
    case ExecStage::kRegain:
      return Internal(fmt::format(
          "after switching to {} its ids were not all changed, or root could be regained; the "
          "program was not started",
          identity.Describe()));
    default:
      return Internal(
          fmt::format("{} failed (stage {}): {}", kExecHelperName, report.stage, cause));
  }
}

}  // namespace tocl::daemon::spawn
