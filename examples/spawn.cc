// Spawn a worker on another host of the cluster and get its exit notice.
//
//   ./spawn                  # on the least loaded host other than this one
//   ./spawn --host h2        # on host h2
//   h2.p4 exited: status 0 (exited with status 0; exited normally)
//   h2.p4 wrote: hello from h2.p4, spawned by h1.p3.t1
//
// The worker is this same program (its real path, started with the argument
// `worker`): the target host's daemon must allow it, e.g. `toclsd
// --spawn-allow '/opt/app/bin/*'` or `[spawn] allow` in its toclsd.toml.
// The notice and the worker's output come through the daemons; the two
// could as well exchange messages (pingpong.cc), which between hosts needs
// a cluster with credentials (README, "Security").
#include <tocl/directory_client.h>
#include <tocl/exit_notice.h>
#include <tocl/runtime.h>
#include <tocl/version.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace {

constexpr tocl::Tag kExitNotice = 1;

int Fail(const tocl::Status& status) {
  std::fprintf(stderr, "spawn: %s\n", status.ToString().c_str());
  return 1;
}

// The spawned side. A spawned program must start a tocl::Runtime (it
// enrolls: that is when the spawn returns); its stdout and stderr go to
// files its daemon keeps, readable from any host.
int Worker(tocl::Runtime& runtime) {
  std::printf("hello from %s, spawned by %s\n", runtime.gid().ToString().c_str(),
              runtime.parent().ToString().c_str());
  std::fflush(stdout);  // before the runtime leaves the directory
  return 0;
}

int Spawner(tocl::Runtime& runtime, std::string_view host) {
  tocl::Result<tocl::Gid> me = runtime.EnrollThread("spawner");
  if (!me.ok()) return Fail(me.status());

  tocl::SpawnOptions options;
  options.executable = std::filesystem::read_symlink("/proc/self/exe");  // this program
  options.args = {"worker"};
  if (host.empty()) {
    // Placement by query: the least loaded host that is not this one.
    options.where = "host!=" + runtime.gid().host().ToString();
  } else {
    tocl::Result<tocl::Gid> gid = tocl::Gid::Parse(host);
    if (!gid.ok()) return Fail(gid.status());
    options.host = *gid;
  }
  // Returns once the worker has enrolled (its parent is `me`).
  tocl::Result<tocl::SpawnedProcess> worker = runtime.SpawnProcess(*me, options);
  if (!worker.ok()) return Fail(worker.status());

  // One message, from the worker's gid with tag kExitNotice, when it exits
  // or its host goes down; at once if that has happened already.
  tocl::Result<uint64_t> watch = runtime.Notify(*me, worker->gid, kExitNotice);
  if (!watch.ok()) return Fail(watch.status());
  tocl::Result<tocl::Buffer> message =
      runtime.RecvFor(*me, std::chrono::seconds(30), worker->gid, kExitNotice);
  if (!message.ok()) return Fail(message.status());
  tocl::Result<tocl::ExitNotice> notice = tocl::ParseExitNotice(*message);
  if (!notice.ok()) return Fail(notice.status());
  if (notice->exit_status) {
    std::printf("%s exited: status %d (%s)\n", notice->gid.ToString().c_str(), *notice->exit_status,
                notice->reason.c_str());
  } else {  // killed by a signal, or its host went down
    std::printf("%s %s: %s\n", notice->gid.ToString().c_str(),
                std::string(tocl::ExitWhatName(notice->what)).c_str(), notice->reason.c_str());
  }

  // What it printed, read through the daemon of its host.
  auto directory = tocl::DirectoryClient::Connect();
  if (!directory.ok()) return Fail(directory.status());
  tocl::Result<tocl::LogChunk> output =
      (*directory)->ReadLog(worker->gid, tocl::LogStream::kStdout);
  if (!output.ok()) return Fail(output.status());
  std::printf("%s wrote: %s", worker->gid.ToString().c_str(), output->data.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view first = argc > 1 ? argv[1] : "";
  if (first == "--version") {
    std::printf("spawn (tocl %s)\n", TOCL_VERSION_STRING);
    return 0;
  }
  const bool worker = first == "worker";
  std::string_view host;
  if (first == "--host" && argc > 2) host = argv[2];

  auto runtime = tocl::Runtime::Start({.name = worker ? "spawn-worker" : "spawn"});
  if (!runtime.ok()) return Fail(runtime.status());
  const int result = worker ? Worker(**runtime) : Spawner(**runtime, host);
  (void)(*runtime)->Shutdown();
  return result;
}
