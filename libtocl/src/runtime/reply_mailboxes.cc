#include "runtime/reply_mailboxes.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/internal_threads.h"

namespace tocl::runtime {

Result<Mailbox*> ReplyMailboxes::Acquire(std::vector<Gid> peers, std::string_view what) {
  std::lock_guard lock(mu_);
  Mailbox* mailbox = nullptr;
  if (!free_.empty()) {
    mailbox = free_.back();
    free_.pop_back();
  } else if (made_ == kReplyMailboxes) {
    return ResourceExhausted(
        fmt::format("{} {} calls of this process are waiting already", kReplyMailboxes, what));
  } else {
    mailbox = receive_.AddInternal(kFirstInternalThread + made_++);
  }
  pending_[mailbox] = Call{std::move(peers), {}};
  return mailbox;
}

void ReplyMailboxes::Release(Mailbox* mailbox) {
  // A late reply (after a timeout) must not linger, holding a buffer.
  while (detail::BufferSlot* stale = mailbox->Take(Selector{})) receive_.Release(stale);
  std::lock_guard lock(mu_);
  pending_.erase(mailbox);
  free_.push_back(mailbox);
}

std::vector<std::pair<Gid, Status>> ReplyMailboxes::Failures(Mailbox* mailbox) {
  std::lock_guard lock(mu_);
  auto it = pending_.find(mailbox);
  return it == pending_.end() ? std::vector<std::pair<Gid, Status>>{} : it->second.failures;
}

size_t ReplyMailboxes::FailureCount(Mailbox* mailbox) {
  std::lock_guard lock(mu_);
  auto it = pending_.find(mailbox);
  return it == pending_.end() ? 0 : it->second.failures.size();
}

Status ReplyMailboxes::FirstFailure(Mailbox* mailbox) {
  std::lock_guard lock(mu_);
  auto it = pending_.find(mailbox);
  if (it == pending_.end() || it->second.failures.empty()) return Status::Ok();
  return it->second.failures.front().second;
}

void ReplyMailboxes::FailPending(Gid scope, const Status& why) {
  std::lock_guard lock(mu_);
  for (auto& [mailbox, call] : pending_) {
    bool woke = false;
    for (Gid peer : call.peers) {
      const bool inside = scope.is_process() ? peer == scope : peer.host() == scope;
      const bool known = std::any_of(call.failures.begin(), call.failures.end(),
                                     [&](const auto& failure) { return failure.first == peer; });
      if (!inside || known) continue;
      call.failures.emplace_back(peer, why);
      woke = true;
    }
    if (woke) mailbox->Wake();
  }
}

}  // namespace tocl::runtime
