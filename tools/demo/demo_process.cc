#include "demo_process.h"

#include <fmt/format.h>

#include "support/daemon_connection.h"
#include "tocl/directory_client.h"

namespace tocl::demo {
namespace {

// Enrolls, registers the threads, says "ready <gid>" and waits for the word
// to leave.
Status Run(const std::string& daemon, const DemoProcess& process, const Fd& ready, const Fd& go) {
  TOCL_ASSIGN_OR_RETURN(auto client, cli::ConnectToDaemon(daemon));
  TOCL_ASSIGN_OR_RETURN(auto session,
                        client->Enroll({.name = process.name, .attributes = process.attributes}));
  const Gid gid = session->gid();

  // Thread ids are the process's to hand out: no round trip per thread.
  std::vector<ThreadInfo> threads;
  for (size_t i = 0; i < process.threads.size(); ++i) {
    const auto index = static_cast<uint32_t>(i + 1);
    threads.push_back(
        {Gid::Thread(gid, index), process.threads[i].name, process.threads[i].attributes});
  }
  TOCL_RETURN_IF_ERROR(session->RegisterThreads(threads).WithContext("register threads"));

  TOCL_RETURN_IF_ERROR(WriteLine(ready, fmt::format("ready {}", gid.ToString())));
  // Any line, or the parent going away, means: leave now.
  (void)ReadLine(go, kNoDeadline);
  return session->Close("exited normally").WithContext("close");
}

}  // namespace

int RunDemoProcess(const std::string& daemon, const DemoProcess& process, const Fd& ready,
                   const Fd& go) {
  const Status status = Run(daemon, process, ready, go);
  if (status.ok()) return 0;
  // The parent may be gone too; then nobody is left to tell.
  (void)WriteLine(ready, fmt::format("error {}: {}", process.name, status.ToString()));
  return 1;
}

}  // namespace tocl::demo
