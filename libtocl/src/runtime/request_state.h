// What a Request (tocl/request.h) holds: a receive posted on its thread's
// mailbox (posted_receive.h), or a long send carried by the background
// thread (background_sends.h), or an outcome known at once; and the parts
// of the runtime it waits through. Made by the runtime (runtime.cc),
// finished by the request's owner (request.cc).
//
// Threading: the owner's thread only, except `post` and `send`, which the
// delivery path and the background thread complete (their `done` flags).
#pragma once

#include <atomic>
#include <memory>

#include "runtime/background_sends.h"
#include "runtime/posted_receive.h"
#include "runtime/receive_side.h"
#include "tocl/buffer.h"
#include "tocl/message_info.h"
#include "tocl/request.h"
#include "tocl/status.h"

namespace tocl::detail {

struct RequestState {
  Request::Kind kind = Request::Kind::kSend;
  // How it waits and withdraws while pending: the runtime's receive side,
  // and the mailbox signalled when it completes (the receiving thread's,
  // or the sending thread's). Not used once complete, so a request may
  // outlive its runtime once Shutdown completed it.
  runtime::ReceiveSide* receive = nullptr;
  runtime::Mailbox* mailbox = nullptr;

  // kRecv, kRecvInto. Its status and info are every request's outcome
  // once Finish ran (a send's status is copied there).
  runtime::PostedReceive post;
  std::unique_ptr<runtime::SendJob> send;  // kSend of a long message

  // Set by Finish, with the message of a kRecv.
  bool finished = false;
  Buffer buffer;
  bool taken = false;

  // Whether it completed (its outcome may not have been collected yet).
  // seq_cst, not just acquire: a waiter across threads reads it after
  // counting itself (RequestCompletions, mailbox.h); on x86 and ARMv8 it
  // costs what an acquire load does.
  bool Complete() const {
    if (finished) return true;
    if (send != nullptr) return send->done.load(std::memory_order_seq_cst);
    return post.done.load(std::memory_order_seq_cst);
  }
  // Collects the outcome of a complete request.
  void Finish();
};

}  // namespace tocl::detail
