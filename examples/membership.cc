// Membership upcalls: follow the members of a directory query as they join,
// leave and become unreachable (Ibis IPL's joined/left/died upcalls).
//
//   ./membership 'kind=process and role=indexer'          # until Ctrl-C
//   ./membership 'kind=process' --current                  # the current set, then exit
//   ./membership 'kind=thread and role=merger' --events 5  # the first five events
//
// Every callback prints one line:
//   joined h1.p4 indexer-2 (running)
//   current: 3 members
//   left h1.p4 indexer-2 (exited: killed by signal 9)
//
// The callbacks run on the watch's own thread; main waits for Ctrl-C (or
// for enough events) and cancels the watch, after which no callback runs.
#include <tocl/membership.h>
#include <tocl/runtime.h>
#include <tocl/version.h>

#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

namespace {

int Fail(const tocl::Status& status) {
  std::fprintf(stderr, "membership: %s\n", status.ToString().c_str());
  return 1;
}

// What the watch's thread tells main: the members now, and when to stop.
struct Members {
  std::mutex mu;
  std::condition_variable done;
  std::set<tocl::Gid> gids;
  long events = 0;
  bool finished = false;
};

void Print(const tocl::MembershipEvent& event, size_t members) {
  const tocl::Entity& entity = event.entity;
  const std::string_view change = tocl::MembershipChangeName(event.change);
  if (event.change == tocl::MembershipChange::kCurrent) {
    std::printf("current: %zu members\n", members);
  } else if (event.change == tocl::MembershipChange::kLeft && !entity.exit_reason.empty()) {
    std::printf("%.*s %s %s (%s: %s)\n", static_cast<int>(change.size()), change.data(),
                entity.gid.ToString().c_str(), entity.name.c_str(),
                std::string(tocl::EntityStateName(entity.state)).c_str(),
                entity.exit_reason.c_str());
  } else {
    std::printf("%.*s %s %s (%s)\n", static_cast<int>(change.size()), change.data(),
                entity.gid.ToString().c_str(), entity.name.c_str(),
                std::string(tocl::EntityStateName(entity.state)).c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "--version") {
    std::printf("membership (tocl %s)\n", TOCL_VERSION_STRING);
    return 0;
  }
  if (argc < 2) {
    std::fprintf(stderr, "usage: membership QUERY [--current | --events N]\n");
    return 2;
  }
  const std::string query = argv[1];
  bool current_only = false;
  long max_events = 0;  // 0: until Ctrl-C
  for (int i = 2; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--current") {
      current_only = true;
    } else if (arg == "--events" && i + 1 < argc) {
      max_events = std::atol(argv[++i]);
    } else {
      std::fprintf(stderr, "membership: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }

  // Until Ctrl-C or SIGTERM: main waits for them (sigwait), blocked before
  // the runtime starts its threads, which inherit the mask.
  const bool until_signal = !current_only && max_events == 0;
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  if (until_signal) pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto runtime = tocl::Runtime::Start({.name = "membership"});
  if (!runtime.ok()) return Fail(runtime.status());

  Members members;
  auto watch = (*runtime)->WatchMembers(query, [&](const tocl::MembershipEvent& event) {
    std::lock_guard lock(members.mu);
    if (event.change == tocl::MembershipChange::kJoined) members.gids.insert(event.entity.gid);
    if (event.change == tocl::MembershipChange::kLeft) members.gids.erase(event.entity.gid);
    Print(event, members.gids.size());
    ++members.events;
    if ((current_only && event.change == tocl::MembershipChange::kCurrent) ||
        (max_events > 0 && members.events >= max_events)) {
      members.finished = true;
      members.done.notify_all();
    }
  });
  if (!watch.ok()) return Fail(watch.status());  // a query that does not parse says where

  if (until_signal) {
    int signal = 0;
    sigwait(&stop_signals, &signal);
  } else {
    std::unique_lock lock(members.mu);
    members.done.wait(lock, [&] { return members.finished; });
  }
  // No callback runs once this returns: `members` may go.
  tocl::Status cancelled = (*runtime)->CancelWatchMembers(*watch);
  if (!cancelled.ok()) return Fail(cancelled);
  tocl::Status shutdown = (*runtime)->Shutdown();
  return shutdown.ok() ? 0 : Fail(shutdown);
}
