// Which tags a receive takes (UCX's tag + tag mask, libfabric's tag +
// ignore bits, with the mask the other way round): a message with tag `t`
// matches when (t & mask) == (tag & mask). Bits outside the mask are
// "don't care", so an application can put a message kind in some bits and
// a sequence or a channel in others and receive by either.
//
// Every receive entry point (Recv, RecvFor, TryRecv, Probe, TryProbe,
// RecvInto, RecvIntoFor, Irecv, IrecvInto) takes a TagMatch. A plain Tag
// converts to one implicitly, so `Recv(me, peer, 7)` is an exact match as
// it always was, and kAnyTag is the empty mask (any tag):
//
//   constexpr tocl::Tag kKindBits = 0xFF00'0000;
//   // Any message whose top byte says "result", whatever the low bits hold.
//   runtime->Recv(me, tocl::Gid(), tocl::TagMatch::Masked(0x0200'0000, kKindBits));
//
// Order: masks change only which messages match; among those, the
// non-overtaking rule holds as for exact tags (tocl/runtime.h).
//
// A value type: copy it freely.
#pragma once

#include "tocl/buffer.h"

namespace tocl {

struct TagMatch {
  Tag tag = 0;
  // Bits of the message's tag that must equal tag's; 0 matches every tag.
  Tag mask = 0;

  // Any tag.
  constexpr TagMatch() = default;
  // Exactly `exact`; kAnyTag (never a message's tag) means any tag.
  constexpr TagMatch(Tag exact)  // NOLINT(google-explicit-constructor): Recv(me, peer, 7)
      : tag(exact == kAnyTag ? 0 : exact), mask(exact == kAnyTag ? 0 : ~Tag{0}) {}
  // The tags t with (t & mask) == (tag & mask).
  static constexpr TagMatch Masked(Tag tag, Tag mask) {
    TagMatch match;
    match.tag = tag & mask;
    match.mask = mask;
    return match;
  }

  // One xor, one and: as cheap as the exact comparison it replaces.
  constexpr bool Matches(Tag message_tag) const { return ((message_tag ^ tag) & mask) == 0; }
  constexpr bool any() const { return mask == 0; }
  constexpr bool exact() const { return mask == ~Tag{0}; }

  constexpr bool operator==(const TagMatch&) const = default;
};

}  // namespace tocl
