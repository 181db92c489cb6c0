#include "runtime/membership/membership_watch.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>

#include "core/logger.h"

namespace tocl::runtime {
namespace {

// The members: what matches and has not exited (unreachable entities read
// as running in queries: the state is derived from the host).
std::string MembersQuery(std::string_view expression) {
  return fmt::format("({}) and state=running", expression);
}

// The changes that may change the set. Removals are of entities that
// exited before (never members).
const std::vector<ChangeOp> kSetChanges = {ChangeOp::kAdded, ChangeOp::kUpdated, ChangeOp::kExited,
                                           ChangeOp::kUnreachable, ChangeOp::kReachable};

// What a member that left is reported as: the entity of its exit when that
// is the change that made the read (`cause`, null for none), else the
// directory's entry now (exited with its reason, or running when it no
// longer matches), the last one reported with the exit's fields when the
// daemon keeps only a tombstone, or as last reported when it does not
// know it (any more).
Entity AsLeft(DirectoryClient& client, Entity last, const ChangeEvent* cause) {
  if (cause && cause->op == ChangeOp::kExited && cause->gid == last.gid && !cause->entity.removed) {
    return cause->entity;
  }
  Result<Entity> now = client.Lookup(last.gid);
  if (!now.ok()) return last;
  if (!now->removed) return std::move(now).value();
  last.state = now->state;
  last.exit_reason = now->exit_reason;
  last.removed = true;
  return last;
}

}  // namespace

Result<std::unique_ptr<MembershipWatch>> MembershipWatch::Start(DirectoryClient& client,
                                                                std::string_view expression,
                                                                MembershipCallback callback) {
  if (!callback) return InvalidArgument("WatchMembers needs a callback");
  std::unique_ptr<MembershipWatch> watch(
      new MembershipWatch(client, MembersQuery(expression), std::move(callback)));
  // The caller's own text first: its errors name positions in it, and
  // only a query that parses alone may be put in parentheses (else
  // "a) or (b" would become another query).
  Result<QueryPage> own = client.Query(expression, 1);
  if (!own.ok()) return own.status();
  Result<DirectoryRead> first = watch->ReadSet();
  if (!first.ok() && first.status().code() == StatusCode::kInvalidArgument) {
    // Only the added condition is too much (the query's limits).
    return InvalidArgument(
        fmt::format("a membership watch reads '{}', which the daemon refuses: {}", watch->query_,
                    first.status().message()));
  }
  if (!first.ok()) return first.status();
  watch->thread_ =
      std::jthread([watch = watch.get(), first = std::move(first).value()](
                       std::stop_token stop) mutable { watch->Run(stop, std::move(first)); });
  return watch;
}

MembershipWatch::MembershipWatch(DirectoryClient& client, std::string query,
                                 MembershipCallback callback)
    : client_(client), query_(std::move(query)), callback_(std::move(callback)) {}

MembershipWatch::~MembershipWatch() {
  RequestStop();
  if (thread_.joinable()) thread_.join();
}

void MembershipWatch::RequestStop() {
  thread_.request_stop();
}

bool MembershipWatch::OnOwnThread() const {
  return thread_.get_id() == std::this_thread::get_id();
}

Result<DirectoryRead> MembershipWatch::ReadSet() {
  return ReadMatches(client_, query_, 0);
}

void MembershipWatch::Run(std::stop_token stop, DirectoryRead first) {
  Apply(stop, std::move(first.matches));
  Deliver(stop, {MembershipChange::kCurrent, {}});
  uint64_t seen = first.seen;
  auto retry = kFirstRetry;
  Status last_failure;
  // The daemon going away is expected (a restart); anything else is
  // warned of once per run of the same failure, from the stream or a read.
  const auto note = [&](const Status& failure) {
    if (!DaemonWentAway(failure) && failure.code() != last_failure.code()) {
      Log().warn("tocl: the membership watch of '{}' lost the directory's changes: {}", query_,
                 failure.ToString());
    }
    last_failure = failure;
  };
  while (!stop.stop_requested()) {
    bool streamed = false;
    Status failure = Follow(stop, seen, streamed);
    if (stop.stop_requested()) break;
    // Only a stream that delivered something starts the pauses over: a
    // daemon that ends every stream at once is not read every 20 ms.
    if (streamed) retry = kFirstRetry;
    // The stream broke or a read failed: read again once the daemon
    // answers, and follow from there.
    note(failure);
    for (;;) {
      PauseUnlessStopped(stop, retry);
      retry = std::min(retry * 2, kLastRetry);
      if (stop.stop_requested()) break;
      Result<DirectoryRead> read = ReadSet();
      if (!read.ok()) {
        note(read.status());
        continue;
      }
      seen = read->seen;
      Apply(stop, std::move(read->matches));
      break;
    }
  }
  finished_.store(true, std::memory_order_release);
}

Status MembershipWatch::Follow(std::stop_token stop, uint64_t& seen, bool& streamed) {
  Status failed_read;
  Status watched = client_.WatchUntil(
      seen, std::chrono::system_clock::time_point::max(),
      [&](const ChangeEvent& event) {
        streamed = true;
        if (event.seq <= seen) return true;  // the last read has it
        // An exit, or a host's turn, where no member lies changes nothing
        // (an entity that joined and exited between two reads is not
        // reported: see the header). Additions and updates may make
        // anything match: the daemon alone evaluates the query.
        const bool scoped = event.op == ChangeOp::kExited || event.op == ChangeOp::kUnreachable ||
                            event.op == ChangeOp::kReachable;
        if (scoped && !members_.AnyWithin(event.gid)) return true;
        Result<DirectoryRead> read = ReadSet();
        if (!read.ok()) {
          failed_read = read.status();
          return false;
        }
        seen = read->seen;
        Apply(stop, std::move(read->matches), &event);
        return !stop.stop_requested();
      },
      kSetChanges, stop);
  if (!failed_read.ok()) return failed_read;
  // Ended by us (ok) only when stopping; else the daemon ended it.
  return watched.ok() ? Unavailable("the daemon ended the change stream") : watched;
}

void MembershipWatch::Apply(std::stop_token stop, std::vector<Entity> read,
                            const ChangeEvent* cause) {
  for (MembershipEvent& event : members_.Reconcile(std::move(read))) {
    if (stop.stop_requested()) return;
    if (event.change == MembershipChange::kLeft) {
      event.entity = AsLeft(client_, std::move(event.entity), cause);
    }
    Deliver(stop, event);
  }
}

void MembershipWatch::Deliver(std::stop_token stop, const MembershipEvent& event) {
  if (stop.stop_requested()) return;
  try {
    callback_(event);
  } catch (const std::exception& error) {
    Log().error("tocl: the membership callback of '{}' threw: {}", query_, error.what());
  } catch (...) {
    Log().error("tocl: the membership callback of '{}' threw", query_);
  }
}

}  // namespace tocl::runtime
