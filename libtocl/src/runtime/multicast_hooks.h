// What multicast (multicast_service.h, multicast_relay.h) needs of the
// runtime, as hooks: both halves see the runtime only through them.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "runtime/mailbox.h"
#include "runtime/send_side.h"
#include "tocl/gid.h"
#include "tocl/runtime.h"
#include "tocl/status.h"

namespace tocl::runtime {

struct MulticastHooks {
  // A copy of `payload` from `from` (a thread of this process, internal
  // ones included) to `to`: Runtime::Send without the public checks.
  std::function<Status(Gid from, Gid to, Tag tag, std::span<const std::byte> payload)> send;
  // A marker in the (from, to) pair (SendSide::PostMarker): the number it
  // took, or Send's error for `to`.
  std::function<Result<uint64_t>(Gid from, Gid to, Tag tag, uint64_t total, Gid carrier,
                                 uint64_t nonce)>
      post_marker;
  // `payload` to `to` as the fill of number `fill.seq` of the (from, to) pair,
  // `from` a thread of this process or of the one this relays for; `wake`
  // is the carrying thread's mailbox (a long message's answers ring it).
  std::function<Status(Gid from, Gid to, Tag tag, std::span<const std::byte> payload, FillOf fill,
                       Mailbox& wake)>
      send_fill;
  // Tells `to` that number `seq` of the (from, to) pair gets no fill
  // (SendSide::PostNoFill).
  std::function<void(Gid from, Gid to, uint64_t seq)> post_no_fill;
  // The mailbox of enrolled thread `from` (SendSide::CheckSender's errors).
  std::function<Result<Mailbox*>(Gid from)> sender_mailbox;
};

}  // namespace tocl::runtime
