// Runtime's message handlers (tocl/handler.h): the public checks, then a
// registration with the dispatch (handler_dispatch.h).
#include <fmt/format.h>

#include "runtime/handler_dispatch.h"
#include "runtime/runtime_impl.h"
#include "tocl/runtime.h"

namespace tocl {

namespace {

// The tag selector is taken as Recv takes it: bits of `tag.tag` outside
// `tag.mask` are ignored (TagMatch::Matches), not refused.
Status CheckSource(Gid source) {
  if (!source.is_null() && !source.valid()) {
    return InvalidArgument(
        fmt::format("handler source {} is not a thread, process or host (Gid() for any source)",
                    source.ToString()));
  }
  return Status::Ok();
}

}  // namespace

Result<HandlerRegistration> Runtime::RegisterHandler(Gid thread, Gid source, TagMatch tag,
                                                     HandlerFunction handler,
                                                     HandlerOptions options) {
  Impl& impl = *impl_;
  if (!handler) return InvalidArgument("RegisterHandler with an empty handler function");
  TOCL_RETURN_IF_ERROR(CheckSource(source));
  if (!options.ordered && options.max_concurrent_calls == 0) {
    return InvalidArgument("an unordered handler needs max_concurrent_calls of at least 1");
  }
  if (impl.shutting_down.load()) return Unavailable("the runtime is shutting down");
  const bool enroll = thread.is_null();
  if (enroll) {
    TOCL_ASSIGN_OR_RETURN(
        thread, impl.EnrollThread(std::move(options.thread_name), std::move(options.attributes)));
  }
  Result<HandlerId> id = [&]() -> Result<HandlerId> {
    TOCL_ASSIGN_OR_RETURN(runtime::Mailbox * mailbox, impl.receive.LocalMailbox(thread));
    return impl.handlers->Register(thread, *mailbox, runtime::Selector{source, tag}, options,
                                   std::move(handler));
  }();
  if (!id.ok()) {
    // A thread enrolled for the handler goes with it.
    if (enroll) impl.LeaveThread(thread);
    return id.status();
  }
  return HandlerRegistration{*id, thread};
}

Status Runtime::CancelHandler(HandlerId id) {
  return impl_->handlers->Cancel(id);
}

}  // namespace tocl
