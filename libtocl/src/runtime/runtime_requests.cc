// Runtime's non-blocking requests (tocl/request.h): Isend, Irecv and
// IrecvInto make a RequestState; request.cc waits for and finishes it.
#include <fmt/format.h>

#include "runtime/internal_threads.h"
#include "runtime/request_state.h"
#include "runtime/runtime_impl.h"
#include "tocl/runtime.h"

namespace tocl {

namespace {

// A request whose outcome is known at once (a short send queued).
Request Completed(Status status) {
  auto state = std::make_unique<detail::RequestState>();
  state->kind = Request::Kind::kSend;
  state->finished = true;
  state->post.status = std::move(status);
  return Request(std::move(state));
}

}  // namespace

Result<Request> Runtime::Isend(Gid from, Gid to, Tag tag, Buffer&& buffer) {
  TOCL_RETURN_IF_ERROR(impl_->send_side.SendBuffer(from, to, tag, std::move(buffer)));
  return Completed(Status::Ok());
}

Result<Request> Runtime::Isend(Gid from, Gid to, Tag tag, Buffer& buffer) {
  TOCL_RETURN_IF_ERROR(impl_->send_side.SendBuffer(from, to, tag, buffer));
  return Completed(Status::Ok());
}

Result<Request> Runtime::Isend(Gid from, Gid to, Tag tag, std::span<const std::byte> payload) {
  TOCL_RETURN_IF_ERROR(runtime::CheckUserEnds(from, to));
  Impl& impl = *impl_;
  // A long message to another process is the background thread's; the
  // rest is Send's, done when it returns (queued; a long one to a thread
  // of this process is copied into its mailbox).
  if (payload.size() <= impl.ShortMaxPayload() || to.process() == impl.process) {
    TOCL_RETURN_IF_ERROR(impl.send_side.SendCopy(from, to, tag, payload));
    return Completed(Status::Ok());
  }
  if (payload.size() > kMaxMessageBytes) {
    return InvalidArgument(fmt::format("a {} byte message is larger than the limit of {} bytes",
                                       payload.size(), kMaxMessageBytes));
  }
  TOCL_RETURN_IF_ERROR(impl.send_side.CheckSend(from, to, tag));
  TOCL_ASSIGN_OR_RETURN(runtime::SendQueue * peer, impl.routes.PeerOf(to));
  auto state = std::make_unique<detail::RequestState>();
  state->kind = Request::Kind::kSend;
  state->receive = &impl.receive;
  state->mailbox = impl.receive.Find(from);  // CheckSend: an enrolled thread
  state->send = std::make_unique<runtime::SendJob>();
  state->send->peer = peer;
  state->send->owner = state->mailbox;
  TOCL_RETURN_IF_ERROR(impl.background_sends.Start(*state->send, from, to, tag, payload));
  return Request(std::move(state));
}

namespace {

Result<Request> PostReceive(Runtime::Impl& impl, Gid self, Request::Kind kind,
                            runtime::Selector selector, std::span<std::byte> out) {
  TOCL_ASSIGN_OR_RETURN(runtime::Mailbox * mailbox, impl.receive.LocalMailbox(self));
  if (impl.shutting_down.load()) {
    return Status(StatusCode::kCancelled, "the runtime is shutting down");
  }
  auto state = std::make_unique<detail::RequestState>();
  state->kind = kind;
  state->receive = &impl.receive;
  state->mailbox = mailbox;
  state->post.selector = selector;
  state->post.into = kind == Request::Kind::kRecvInto;
  state->post.out = out;
  impl.receive.Post(*mailbox, state->post);
  return Request(std::move(state));
}

}  // namespace

Result<Request> Runtime::Irecv(Gid self, Gid source, TagMatch tag) {
  return PostReceive(*impl_, self, Request::Kind::kRecv, runtime::Selector{source, tag}, {});
}

Result<Request> Runtime::IrecvInto(Gid self, std::span<std::byte> out, Gid source, TagMatch tag) {
  return PostReceive(*impl_, self, Request::Kind::kRecvInto, runtime::Selector{source, tag}, out);
}

}  // namespace tocl
