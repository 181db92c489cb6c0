#include "demo_child.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/posix.h"

namespace tocl::demo {
namespace {

// How long a child that is told to leave in the destructor may take.
constexpr auto kLeaveTimeout = std::chrono::seconds(5);

// waitpid, retried on EINTR: the wait status, or an error.
Result<int> Reap(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return ErrnoStatus(fmt::format("waitpid {}", pid), errno);
  }
  return status;
}

}  // namespace

Result<std::unique_ptr<DemoChild>> DemoChild::Start(const std::string& daemon,
                                                    const DemoProcess& process,
                                                    DemoChildren& started) {
  TOCL_ASSIGN_OR_RETURN(Pipe ready, Pipe::Open());
  TOCL_ASSIGN_OR_RETURN(Pipe go, Pipe::Open());
  // Whatever is buffered would be written twice, once by each process.
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) return ErrnoStatus("fork", errno);
  if (pid == 0) {
    for (auto& sibling : started) sibling->Forget();
    ready.read.Close();
    go.write.Close();
    // _Exit: the parent's buffers and static destructors are not ours to run.
    std::_Exit(RunDemoProcess(daemon, process, ready.write, go.read));
  }
  return std::unique_ptr<DemoChild>(
      new DemoChild(pid, process.name, std::move(ready.read), std::move(go.write)));
}

DemoChild::DemoChild(pid_t pid, std::string name, Fd ready, Fd go)
    : pid_(pid), name_(std::move(name)), ready_(std::move(ready)), go_(std::move(go)) {}

DemoChild::~DemoChild() {
  if (pid_ <= 0) return;
  go_.Close();  // end of file: the child leaves
  if (!WaitForClose(ready_, std::chrono::steady_clock::now() + kLeaveTimeout).ok()) {
    ::kill(pid_, SIGKILL);
  }
  (void)Reap(pid_);
}

void DemoChild::Forget() {
  ready_.Close();
  go_.Close();
  pid_ = -1;
}

Result<Gid> DemoChild::WaitReady(Deadline deadline) {
  auto line = ReadLine(ready_, deadline);
  if (!line.ok()) return line.status().WithContext(fmt::format("{} did not start", name_));
  if (line->starts_with("ready ")) return Gid::Parse(line->substr(6));
  if (line->starts_with("error ")) return Internal(line->substr(6));
  return Internal(fmt::format("{} said '{}'", name_, *line));
}

Status DemoChild::Stop(Deadline deadline) {
  TOCL_RETURN_IF_ERROR(WriteLine(go_, "exit").WithContext(fmt::format("tell {} to exit", name_)));
  // Read to end of file (the child has exited), keeping any error it reports.
  std::string error;
  while (true) {
    auto line = ReadLine(ready_, deadline);
    if (line.ok()) {
      if (line->starts_with("error ")) error = line->substr(6);
      continue;
    }
    if (line.status().code() == StatusCode::kUnavailable) break;
    return line.status().WithContext(fmt::format("{} did not exit", name_));
  }
  auto status = Reap(pid_);
  pid_ = -1;
  if (!status.ok()) return status.status();
  if (!error.empty()) return Internal(error);
  if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    return Internal(fmt::format("{} ended with wait status {:#x}", name_, *status));
  }
  return Status::Ok();
}

}  // namespace tocl::demo
