#include "runtime/posted_receive.h"

#include <utility>

#include "runtime/mailbox.h"

namespace tocl::runtime {

void PostedReceive::Complete(Status outcome) {
  status = std::move(outcome);
  // Read before `done`: the owner may free the receive as soon as it is set.
  RequestCompletions* tell = completions;
  done.store(true, std::memory_order_seq_cst);
  if (tell != nullptr) tell->NoteDone();
}

void PostedReceives::Append(PostedReceive* post) {
  post->prev = tail_;
  post->next = nullptr;
  if (tail_ != nullptr) {
    tail_->next = post;
  } else {
    head_ = post;
  }
  tail_ = post;
  post->listed = true;
}

void PostedReceives::Remove(PostedReceive* post) {
  if (!post->listed) return;
  if (post->prev != nullptr) {
    post->prev->next = post->next;
  } else {
    head_ = post->next;
  }
  if (post->next != nullptr) {
    post->next->prev = post->prev;
  } else {
    tail_ = post->prev;
  }
  post->prev = post->next = nullptr;
  post->listed = false;
}

PostedReceive* PostedReceives::FirstMatch(Gid from, Tag tag, uint16_t flags) const {
  for (PostedReceive* post = head_; post != nullptr; post = post->next) {
    if (post->selector.Matches(from, tag, flags)) return post;
  }
  return nullptr;
}

}  // namespace tocl::runtime
