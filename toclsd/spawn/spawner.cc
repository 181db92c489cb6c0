#include "spawn/spawner.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <vector>

#include "spawn/child_environment.h"
#include "spawn/exec_helper.h"
#include "spawn/executable.h"
#include "store/limits.h"

// glibc 2.36's <sys/pidfd.h> lacks __BEGIN_DECLS (fixed in 2.37).
extern "C" {
#include <sys/pidfd.h>
}

extern char** environ;

namespace tocl::daemon::spawn {
namespace {

// The PATH a daemon started without one searches (execvp's default).
constexpr const char* kDefaultSearchPath = "/usr/local/bin:/usr/bin:/bin";
constexpr size_t kMaxArgs = 4096;
// How long after its enroll stream ended a child has to be reaped, so that
// the EXITED change carries its exit status; after that it is marked exited
// without (and the status follows as an UPDATED change when it is reaped).
constexpr auto kReapWait = std::chrono::seconds(2);
// How long a spawn that timed out waits for the killed child to be reaped.
constexpr auto kKillWait = std::chrono::seconds(2);
constexpr size_t kDefaultLogChunk = size_t{1} << 20;
// How often the running children's logs are held to log_max_bytes: a
// program writes at most this long's output past the cap.
constexpr auto kLogCapPeriod = std::chrono::seconds(1);
// 4 MiB less room for the reply's envelope: a reply must fit the 4 MiB a
// gRPC client accepts by default.
constexpr size_t kMaxLogChunk = (size_t{4} << 20) - (size_t{64} << 10);

Status CheckWorkingDirectory(const std::string& dir) {
  if (!dir.starts_with('/')) {
    return InvalidArgument(fmt::format("working directory '{}' is not an absolute path", dir));
  }
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0) {
    return NotFound(fmt::format("working directory {} does not exist", dir));
  }
  if (!S_ISDIR(info.st_mode)) {
    return InvalidArgument(fmt::format("working directory {} is not a directory", dir));
  }
  return Status::Ok();
}

Status CheckArgs(const google::protobuf::RepeatedPtrField<std::string>& args) {
  if (static_cast<size_t>(args.size()) > kMaxArgs) {
    return InvalidArgument(fmt::format("{} arguments (at most {})", args.size(), kMaxArgs));
  }
  for (int i = 0; i < args.size(); ++i) {
    if (args[i].find('\0') != std::string::npos) {
      return InvalidArgument(fmt::format("args[{}] contains a NUL byte", i));
    }
  }
  return Status::Ok();
}

std::string BaseName(std::string_view path) {
  size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

// posix_spawn's errors, as what they mean for the request.
Status SpawnError(int error, const std::string& path) {
  switch (error) {
    case ENOENT:
      return NotFound(fmt::format(
          "no such executable {} (or the interpreter its #! line names is missing)", path));
    case EACCES:
      return PermissionDenied(fmt::format("{} is not executable", path));
    case ENOEXEC:
      return InvalidArgument(fmt::format("{} is not a program this host can run", path));
    case E2BIG:
      return InvalidArgument(
          fmt::format("the arguments and environment for {} are too large", path));
    default:
      return ErrnoStatus(fmt::format("start {}", path), error);
  }
}

// posix_spawn's attribute and file-action objects, destroyed on every path.
struct SpawnSetup {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  SpawnSetup() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attributes);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;
};

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (std::string& text : strings) pointers.push_back(text.data());
  pointers.push_back(nullptr);
  return pointers;
}

}  // namespace

Result<std::unique_ptr<Spawner>> Spawner::Start(directory::Store& store, SpawnerOptions options) {
  TOCL_ASSIGN_OR_RETURN(LogFiles logs, LogFiles::Open(options.state_dir + "/logs"));
  std::unique_ptr<Spawner> spawner(new Spawner(store, std::move(options), std::move(logs)));
  spawner->RemoveOrphanLogs();
  Spawner* raw = spawner.get();
  spawner->stream_end_thread_ = std::thread([raw] { raw->StreamEndLoop(); });
  if (spawner->options_.log_max_bytes > 0) {
    spawner->log_cap_thread_ = std::thread([raw] { raw->LogCapLoop(); });
  }
  TOCL_ASSIGN_OR_RETURN(spawner->supervisor_, Supervisor::Start([raw](pid_t pid, int wait_status) {
                          raw->OnReaped(pid, wait_status);
                        }));
  return spawner;
}

Spawner::Spawner(directory::Store& store, SpawnerOptions options, LogFiles logs)
    : store_(store), options_(std::move(options)), logs_(std::move(logs)) {}

Spawner::~Spawner() {
  BeginShutdown();
  if (stream_end_thread_.joinable()) stream_end_thread_.join();
  if (log_cap_thread_.joinable()) log_cap_thread_.join();
  supervisor_.reset();  // before the maps its callback uses
}

void Spawner::BeginShutdown() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
}

Result<pb::SpawnProcessResponse> Spawner::Spawn(const pb::SpawnProcessRequest& request,
                                                const directory::Caller& spawn_caller,
                                                std::chrono::milliseconds enroll_timeout) {
  const std::string caller = spawn_caller.Describe();
  {
    std::lock_guard lock(mu_);
    if (stopping_) return Unavailable("the daemon is stopping");
  }
  if (options_.allow.empty()) {
    spdlog::warn("refused to spawn {:?} for {} (spawning is disabled: no [spawn] allow list)",
                 request.executable(), caller);
    return PermissionDenied(fmt::format(
        "spawn is disabled on {}: toclsd's configuration has no [spawn] allow list (allow "
        "programs with [spawn] allow = [\"/path/*\"] or --spawn-allow GLOB)",
        store_.host().ToString()));
  }
  const std::string working_directory =
      request.working_directory().empty() ? options_.state_dir : request.working_directory();
  TOCL_RETURN_IF_ERROR(CheckWorkingDirectory(working_directory));
  const char* search_path = std::getenv("PATH");
  TOCL_ASSIGN_OR_RETURN(std::string path,
                        ResolveExecutable(request.executable(),
                                          search_path != nullptr ? search_path : kDefaultSearchPath,
                                          working_directory));
  TOCL_ASSIGN_OR_RETURN(const std::string real_path, CheckAllowed(path, caller));
  TOCL_RETURN_IF_ERROR(CheckArgs(request.args()));
  TOCL_RETURN_IF_ERROR(ValidateEnvEntries(request.env()));
  const std::string name = request.name().empty() ? BaseName(request.executable()) : request.name();

  // The row first: the child is told its Gid and enrolls into it.
  TOCL_ASSIGN_OR_RETURN(directory::Enrollment reserved,
                        store_.ReserveProcess(name, !request.name().empty(), request.attributes(),
                                              Gid::FromRaw(request.parent())));
  const Gid gid = reserved.gid;
  auto child = std::make_shared<Child>();
  child->gid = gid;
  child->program = path;
  child->spawned_for = spawn_caller.uid;
  {
    // Before the child exists: it may enroll before posix_spawn returns.
    std::lock_guard lock(mu_);
    by_gid_[gid] = child;
  }
  Result<std::pair<Fd, Fd>> files = logs_.Create(gid, spawn_caller.uid);
  if (!files.ok()) return Abandon(child, files.status());
  // The daemon's copies of the log files close when `files` goes.
  Result<pid_t> started = StartChild(request, gid, path, real_path, working_directory,
                                     reserved.session_token, files->first, files->second);
  if (!started.ok()) return Abandon(child, started.status());
  const pid_t pid = *started;
  Fd pidfd(::pidfd_open(pid, 0));
  Fd signal_fd(pidfd.valid() ? ::fcntl(pidfd.get(), F_DUPFD_CLOEXEC, 0) : -1);
  if (!pidfd.valid() || !signal_fd.valid()) {
    const int error = errno;
    ::kill(pid, SIGKILL);  // our unreaped child: its pid is not reused before the waitpid
    ::waitpid(pid, nullptr, 0);
    return Abandon(child, ErrnoStatus(fmt::format("pidfd_open({})", pid), error));
  }
  {
    std::lock_guard lock(mu_);
    child->pid = pid;
    child->process.emplace(pid, std::move(signal_fd));
    by_pid_[pid] = child;
  }
  changed_.notify_all();  // an enrollment may be waiting for the pid (CheckEnrollingPid)
  supervisor_->Watch(pid, std::move(pidfd));
  spdlog::info("spawned {} '{}' as pid {}{} for {}", gid.ToString(), path, pid,
               options_.run_as ? " as user " + options_.run_as->user : "", caller);
  // While the child loads (milliseconds): its enrollment then has nothing
  // to write.
  if (Status recorded = store_.RecordSpawnedPid(gid, pid); !recorded.ok()) {
    spdlog::warn("recording the pid of {}: {}", gid.ToString(), recorded.ToString());
  }

  std::unique_lock lock(mu_);
  changed_.wait_for(lock, enroll_timeout,
                    [&] { return child->enrolled || child->recorded || stopping_; });
  if (child->enrolled) {
    pb::SpawnProcessResponse response;
    response.set_gid(gid.raw());
    response.set_os_pid(pid);
    response.set_stdout_path(logs_.PathOf(gid, pb::LOG_STREAM_STDOUT));
    response.set_stderr_path(logs_.PathOf(gid, pb::LOG_STREAM_STDERR));
    return response;
  }
  if (child->recorded) {
    return FailedPrecondition(fmt::format("{} ({}) {} before it enrolled; see `tocl logs {}`",
                                          gid.ToString(), path, child->exit_text, gid.ToString()));
  }
  if (stopping_) {
    return Unavailable(fmt::format(
        "the daemon is stopping; {} (pid {}) was started and may enroll when it is back",
        gid.ToString(), pid));
  }
  child->kill_reason = fmt::format("did not enroll within {} ms", enroll_timeout.count());
  // Through the pidfd: the pid cannot have been reused by then.
  if (Status killed = child->process->Signal(SIGKILL);
      !killed.ok() && killed.code() != StatusCode::kFailedPrecondition) {
    spdlog::error("kill {} (pid {}): {}", gid.ToString(), pid, killed.ToString());
  }
  changed_.wait_for(lock, kKillWait, [&] { return child->recorded; });
  return DeadlineExceeded(fmt::format(
      "{} ({}) did not enroll within {} ms; it was killed{}; see `tocl logs {}`", gid.ToString(),
      path, enroll_timeout.count(), child->recorded ? "" : " (not reaped yet)", gid.ToString()));
}

Result<std::string> Spawner::CheckAllowed(const std::string& path, std::string_view caller) const {
  // The real path: a symlink in an allowed directory may point anywhere.
  TOCL_ASSIGN_OR_RETURN(std::string real_path, RealPath(path));
  if (options_.allow.Allows(real_path)) return real_path;
  const std::string shown =
      real_path == path ? path : fmt::format("{} (real path {})", path, real_path);
  spdlog::warn("refused to spawn {} for {} (not in [spawn] allow)", shown, caller);
  return PermissionDenied(fmt::format("{} does not allow spawning {} (not in [spawn] allow)",
                                      store_.host().ToString(), shown));
}

Result<pid_t> Spawner::StartChild(const pb::SpawnProcessRequest& request, Gid gid,
                                  const std::string& path, const std::string& real_path,
                                  const std::string& working_directory, const std::string& token,
                                  const Fd& stdout_file, const Fd& stderr_file) {
  std::vector<std::string> argv;
  argv.reserve(request.args_size() + 1);
  argv.push_back(request.executable());  // argv[0] as the caller gave it
  for (const std::string& arg : request.args()) argv.push_back(arg);
  const SpawnIdentity identity{.daemon = "unix:" + options_.socket_path,
                               .gid = gid,
                               .token = token,
                               .parent = Gid::FromRaw(request.parent())};
  std::vector<std::string> env = ChildEnvironment(environ, identity, request.env());
  // The real path is executed: the one the allow list was checked against.
  std::string program = real_path;
  // With run_as: toclsd-exec switches users, then execs the program; it
  // reports a failure on a pipe (exec_helper.h).
  Fd report_read, report_write;
  if (options_.run_as) {
    argv = ExecHelperArgs(options_.exec_helper, *options_.run_as, real_path, argv, env);
    env.clear();  // toclsd-exec starts as root: nothing of the request's
    program = options_.exec_helper;
    int ends[2];
    if (::pipe2(ends, O_CLOEXEC) != 0) return ErrnoStatus("pipe for toclsd-exec", errno);
    report_read = Fd(ends[0]);
    Fd write_end(ends[1]);
    // Above the descriptor it becomes in the child, so that the dup2 to
    // it cannot clobber another action's source.
    report_write = Fd(::fcntl(write_end.get(), F_DUPFD_CLOEXEC, kExecReportFd + 1));
    if (!report_write.valid()) return ErrnoStatus("dup the toclsd-exec pipe", errno);
  }
  std::vector<char*> argv_pointers = Pointers(argv);
  std::vector<char*> env_pointers = Pointers(env);

  SpawnSetup setup;
  posix_spawn_file_actions_addopen(&setup.actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&setup.actions, stdout_file.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&setup.actions, stderr_file.get(), STDERR_FILENO);
  posix_spawn_file_actions_addchdir_np(&setup.actions, working_directory.c_str());
  if (report_write.valid()) {
    posix_spawn_file_actions_adddup2(&setup.actions, report_write.get(), kExecReportFd);
  }
  // Nothing of the daemon's leaks into a child that may outlive it (the
  // state lock above all: a restarted daemon could not take it).
  posix_spawn_file_actions_addclosefrom_np(
      &setup.actions, (report_write.valid() ? kExecReportFd : STDERR_FILENO) + 1);

  // Its own session: a terminal's or the daemon's process group signals do
  // not reach it. The daemon blocks SIGINT/SIGTERM in every thread and
  // gRPC ignores SIGPIPE; a child must not inherit either.
  posix_spawnattr_setflags(&setup.attributes,
                           POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&setup.attributes, &none);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int signal = 1; signal < 32; ++signal) {
    if (signal != SIGKILL && signal != SIGSTOP) sigaddset(&defaults, signal);
  }
  posix_spawnattr_setsigdefault(&setup.attributes, &defaults);

  pid_t pid = 0;
  const int error = ::posix_spawn(&pid, program.c_str(), &setup.actions, &setup.attributes,
                                  argv_pointers.data(), env_pointers.data());
  if (error != 0) return SpawnError(error, program == real_path ? path : program);
  if (!options_.run_as) return pid;
  report_write.Close();  // ours: the read below ends when toclsd-exec's closes
  const ExecReport report = ReadExecReport(report_read);
  if (report.stage == 0) return pid;
  ::waitpid(pid, nullptr, 0);  // exited 127; not watched by the supervisor yet
  if (report.stage == static_cast<int32_t>(ExecStage::kExec)) return SpawnError(report.error, path);
  Status failed = DescribeExecFailure(report, *options_.run_as);
  spdlog::error("{} could not be started as {}: {}", gid.ToString(), options_.run_as->user,
                failed.ToString());
  return failed;
}

Status Spawner::Abandon(const std::shared_ptr<Child>& child, const Status& why) {
  {
    std::lock_guard lock(mu_);
    by_gid_.erase(child->gid);
  }
  Status marked = store_.MarkProcessExited(
      child->gid, directory::CleanExitReason("could not be started: " + why.message()));
  if (!marked.ok()) {
    spdlog::error("mark {} exited: {}", child->gid.ToString(), marked.ToString());
  }
  spdlog::info("spawn of {} failed: {}", child->gid.ToString(), why.ToString());
  return why;
}

std::optional<Status> Spawner::KillChild(Gid process, int signal, const directory::Caller& caller) {
  std::lock_guard lock(mu_);
  auto it = by_gid_.find(process);
  if (it == by_gid_.end()) return std::nullopt;
  const Child& child = *it->second;
  if (!child.process) {
    return Unavailable(fmt::format("{} is being started; try again", process.ToString()));
  }
  // Its uids now: with run_as the child is not the caller's uid, but it was
  // spawned for it.
  Result<directory::ProcessUids> uids = child.process->Uids();
  if (!uids.ok()) {
    if (uids.status().code() == StatusCode::kFailedPrecondition) {
      return FailedPrecondition(fmt::format("{} has exited", process.ToString()));
    }
    return uids.status();
  }
  TOCL_RETURN_IF_ERROR(directory::MaySignal(caller, process, {*uids, child.spawned_for}));
  // The pidfd names this very process, even if it exited and its pid was
  // reused meanwhile.
  if (Status sent = child.process->Signal(signal); !sent.ok()) {
    if (sent.code() == StatusCode::kFailedPrecondition) {
      return FailedPrecondition(fmt::format("{} has exited", process.ToString()));
    }
    return sent.WithContext(process.ToString());
  }
  spdlog::info("sent signal {} to {} (pid {}) for {}", signal, process.ToString(), child.pid,
               caller.Describe());
  return Status::Ok();
}

std::optional<uid_t> Spawner::SpawnedFor(Gid process) {
  {
    std::lock_guard lock(mu_);
    auto it = by_gid_.find(process);
    if (it != by_gid_.end()) return it->second->spawned_for;
  }
  return logs_.OwnerOf(process);
}

Status Spawner::CheckEnrollingPid(Gid process, std::optional<pid_t> pid) {
  // Bounded: the pid is set microseconds after posix_spawn returns.
  constexpr auto kPidWait = std::chrono::seconds(5);
  std::unique_lock lock(mu_);
  auto it = by_gid_.find(process);
  if (it == by_gid_.end()) return Status::Ok();
  const std::shared_ptr<Child> child = it->second;
  if (!pid) {
    return PermissionDenied(fmt::format(
        "{} was spawned by this daemon and enrolls on its unix socket, where its pid is "
        "verified; not over TCP",
        process.ToString()));
  }
  changed_.wait_for(lock, kPidWait,
                    [&] { return child->pid != 0 || child->recorded || stopping_; });
  if (child->pid == *pid) return Status::Ok();
  spdlog::warn("pid {} tried to enroll as {}, which this daemon started as pid {}", *pid,
               process.ToString(), child->pid);
  return PermissionDenied(fmt::format(
      "{} is the process this daemon started as pid {}; pid {} may not take its identity",
      process.ToString(), child->pid, *pid));
}

Result<pb::ReadLogResponse> Spawner::ReadLog(const pb::ReadLogRequest& request,
                                             const directory::Caller& caller) {
  const Gid process = Gid::FromRaw(request.process());
  // Whether the process is done is decided before the file is read: then
  // the read has everything it wrote.
  bool running_child = false;
  std::optional<uid_t> spawned_for;
  {
    std::lock_guard lock(mu_);
    auto it = by_gid_.find(process);
    running_child = it != by_gid_.end();
    if (running_child) spawned_for = it->second->spawned_for;
  }
  Result<pb::Entity> entity = store_.Lookup(process);
  if (entity.status().code() == StatusCode::kNotFound) {
    return NotFound(fmt::format("no process {}", process.ToString()));
  }
  TOCL_RETURN_IF_ERROR(entity.status());
  if (entity->removed()) {
    return NotFound(fmt::format("{} exited and was removed from the directory with its logs",
                                process.ToString()));
  }
  if (!spawned_for) spawned_for = logs_.OwnerOf(process);
  if (!spawned_for && !caller.admin) {
    // No stdout log, so no owner to check against: whatever else is there
    // (a stderr log left alone) is only an administrator's to read.
    return NotFound(
        fmt::format("{} has no logs that {} may read", process.ToString(), caller.Describe()));
  }
  if (spawned_for) {
    if (Status allowed = directory::MayReadLog(caller, process, *spawned_for); !allowed.ok()) {
      spdlog::warn("log of {} refused: {}", process.ToString(), allowed.message());
      return allowed;
    }
  }  // an administrator, no log file: Read says so
  const size_t max_bytes = request.max_bytes() == 0
                               ? kDefaultLogChunk
                               : std::min<size_t>(request.max_bytes(), kMaxLogChunk);
  TOCL_ASSIGN_OR_RETURN(LogFiles::Chunk chunk,
                        logs_.Read(process, request.stream(), request.offset(), max_bytes));
  pb::ReadLogResponse response;
  response.set_data(std::move(chunk.data));
  response.set_size(chunk.size);
  response.set_offset(chunk.offset);
  response.set_process_exited(!running_child && entity->state() == pb::EXITED);
  return response;
}

bool Spawner::OnEnrolled(Gid process) {
  {
    std::lock_guard lock(mu_);
    auto it = by_gid_.find(process);
    if (it == by_gid_.end() || it->second->enrolled) return false;
    it->second->enrolled = true;
  }
  changed_.notify_all();
  return true;
}

bool Spawner::OnStreamEnded(Gid process, uint64_t epoch, std::string_view reason) {
  // Not waited for here: the process may be waiting for this very stream to
  // end before it exits.
  {
    std::lock_guard lock(mu_);
    auto it = by_gid_.find(process);
    if (it == by_gid_.end()) return false;
    it->second->stream_end = Child::StreamEnd{
        .epoch = epoch,
        .reason = std::string(reason),
        .deadline = std::chrono::steady_clock::now() + kReapWait,
    };
  }
  changed_.notify_all();
  return true;
}

void Spawner::MarkStreamEndedLocked(std::unique_lock<std::mutex>& lock, Child& child) {
  child.stream_end->marked = true;
  const Gid gid = child.gid;
  const uint64_t epoch = child.stream_end->epoch;
  const std::string reason = child.stream_end->reason;
  lock.unlock();
  // Unless it re-enrolled since (the store decides, as for any process).
  Status marked = store_.MarkStreamEnded(gid, epoch, reason);
  if (!marked.ok()) {
    spdlog::error("could not mark process {} exited: {}", gid.ToString(), marked.ToString());
  }
  lock.lock();
}

void Spawner::StreamEndLoop() {
  std::unique_lock lock(mu_);
  for (;;) {
    // Children are few (a host's spawned processes): a scan per wake-up.
    std::shared_ptr<Child> due;
    auto next = std::chrono::steady_clock::time_point::max();
    const auto now = std::chrono::steady_clock::now();
    for (const auto& [gid, child] : by_gid_) {
      if (!child->stream_end || child->stream_end->marked || child->recorded) continue;
      if (stopping_ || child->stream_end->deadline <= now) {
        due = child;
        break;
      }
      next = std::min(next, child->stream_end->deadline);
    }
    if (due) {
      // Still running (it closed its session and goes on) or slow to die:
      // the row says exited now, the status follows when it is reaped.
      MarkStreamEndedLocked(lock, *due);
      continue;
    }
    if (stopping_) return;
    if (next == std::chrono::steady_clock::time_point::max()) {
      changed_.wait(lock);
    } else {
      changed_.wait_until(lock, next);
    }
  }
}

void Spawner::OnReaped(pid_t pid, int wait_status) {
  const directory::ExitStatus status = ExitStatusOf(wait_status);
  const std::string text = DescribeExit(status);
  std::shared_ptr<Child> child;
  std::string reason;
  {
    std::lock_guard lock(mu_);
    auto it = by_pid_.find(pid);
    if (it == by_pid_.end()) {
      spdlog::warn("reaped pid {}, which is not a child this daemon knows", pid);
      return;
    }
    child = it->second;
    child->exit_text = text;
    if (!child->kill_reason.empty()) {
      reason = fmt::format("{}; {}", child->kill_reason, text);
    } else if (!child->enrolled) {
      reason = text + " before it enrolled";
    } else if (child->stream_end) {
      reason = fmt::format("{}; {}", text, child->stream_end->reason);
    } else {
      reason = text;
    }
  }
  const Gid gid = child->gid;
  // Marked exited with the status, or (already marked when its stream
  // ended) given the status now.
  Status marked = store_.MarkProcessExited(gid, directory::CleanExitReason(reason), status);
  if (marked.ok()) marked = store_.RecordExitStatus(gid, status);
  if (!marked.ok()) {
    spdlog::error("could not record the exit of {}: {}", gid.ToString(), marked.ToString());
  }
  spdlog::info("process {} (pid {}) {}", gid.ToString(), pid, text);
  // Its last output, written since the last check, is capped too.
  if (options_.log_max_bytes > 0) CapLogs(gid);
  {
    std::lock_guard lock(mu_);
    child->recorded = true;
    by_pid_.erase(pid);
    auto it = by_gid_.find(gid);
    if (it != by_gid_.end() && it->second == child) by_gid_.erase(it);
  }
  changed_.notify_all();
}

void Spawner::RemoveLogs(std::span<const Gid> processes) {
  for (Gid process : processes) {
    if (Status removed = logs_.Remove(process); !removed.ok()) {
      spdlog::warn("removing the logs of {}: {}", process.ToString(), removed.ToString());
    }
  }
}

void Spawner::RemoveOrphanLogs() {
  Result<std::vector<Gid>> listed = logs_.List(store_.host());
  if (!listed.ok()) {
    spdlog::warn("listing the spawn logs: {}", listed.status().ToString());
    return;
  }
  std::vector<Gid> orphans;
  for (Gid process : *listed) {
    Result<pb::Entity> entity = store_.Lookup(process);
    const bool gone =
        entity.ok() ? entity->removed() : entity.status().code() == StatusCode::kNotFound;
    if (gone) orphans.push_back(process);
  }
  if (orphans.empty()) return;
  RemoveLogs(orphans);
  spdlog::info("removed the logs of {} processes that are no longer in the directory",
               orphans.size());
}

void Spawner::CapLogs(Gid process) {
  Status capped = logs_.Cap(process, options_.log_max_bytes);
  if (capped.ok()) return;
  std::lock_guard lock(mu_);
  // Once: a file system that cannot punch holes fails the same way every
  // second for every child.
  if (cap_failed_) return;
  cap_failed_ = true;
  spdlog::warn("spawn logs are not kept under log_max_bytes ({}): {}", options_.log_max_bytes,
               capped.ToString());
}

void Spawner::LogCapLoop() {
  std::unique_lock lock(mu_);
  for (;;) {
    const auto next = std::chrono::steady_clock::now() + kLogCapPeriod;
    if (changed_.wait_until(lock, next, [&] { return stopping_; })) return;
    std::vector<Gid> running;
    running.reserve(by_gid_.size());
    for (const auto& [gid, child] : by_gid_) running.push_back(gid);
    lock.unlock();
    for (Gid gid : running) CapLogs(gid);
    lock.lock();
  }
}

}  // namespace tocl::daemon::spawn
