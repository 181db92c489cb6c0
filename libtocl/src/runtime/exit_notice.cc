// The payload of a notification message:
//   u32 magic "TXN1" | u64 gid | u8 what | u8 flags (1: status, 2: signal)
//   | i32 exit status | i32 exit signal | u16 reason length | reason
#include "tocl/exit_notice.h"

#include <fmt/format.h>

#include "runtime/byte_codec.h"

namespace tocl {
namespace {

constexpr uint32_t kNoticeMagic = 0x314E5854;  // "TXN1"
constexpr uint8_t kHasStatus = 1;
constexpr uint8_t kHasSignal = 2;

}  // namespace

std::string_view ExitWhatName(ExitWhat what) {
  return what == ExitWhat::kUnreachable ? "unreachable" : "exited";
}

std::vector<std::byte> EncodeExitNotice(const ExitNotice& notice) {
  runtime::ByteWriter out;
  out.Put(kNoticeMagic);
  out.Put(notice.gid.raw());
  out.Put(static_cast<uint8_t>(notice.what));
  out.Put(static_cast<uint8_t>((notice.exit_status ? kHasStatus : 0) |
                               (notice.exit_signal ? kHasSignal : 0)));
  out.Put(static_cast<int32_t>(notice.exit_status.value_or(0)));
  out.Put(static_cast<int32_t>(notice.exit_signal.value_or(0)));
  const std::string_view reason = std::string_view(notice.reason).substr(0, kMaxExitReasonBytes);
  out.Put(static_cast<uint16_t>(reason.size()));
  out.PutText(reason);
  return std::move(out.bytes());
}

Result<ExitNotice> ParseExitNotice(std::span<const std::byte> bytes) {
  runtime::ByteReader in(bytes);
  const auto magic = in.Get<uint32_t>();
  if (in.ok() && magic != kNoticeMagic) {
    return InvalidArgument("not an exit notice (the message does not start with its marker)");
  }
  ExitNotice notice;
  notice.gid = Gid::FromRaw(in.Get<uint64_t>());
  const auto what = in.Get<uint8_t>();
  const auto flags = in.Get<uint8_t>();
  const auto status = in.Get<int32_t>();
  const auto signal = in.Get<int32_t>();
  const auto reason_bytes = in.Get<uint16_t>();
  notice.reason = std::string(in.GetText(reason_bytes));
  if (!in.ok()) {
    return InvalidArgument(fmt::format("an exit notice of {} bytes is cut short", bytes.size()));
  }
  if (in.remaining() != 0) {
    return InvalidArgument(
        fmt::format("an exit notice has {} bytes after its end", in.remaining()));
  }
  if (!notice.gid.valid()) {
    return InvalidArgument(
        fmt::format("an exit notice names an invalid id ({})", notice.gid.ToString()));
  }
  if (what > static_cast<uint8_t>(ExitWhat::kUnreachable)) {
    return InvalidArgument(fmt::format("an exit notice has an unknown kind ({})", what));
  }
  if ((flags & ~(kHasStatus | kHasSignal)) != 0 || reason_bytes > kMaxExitReasonBytes) {
    return InvalidArgument("an exit notice has unknown flags or too long a reason");
  }
  notice.what = static_cast<ExitWhat>(what);
  if (flags & kHasStatus) notice.exit_status = status;
  if (flags & kHasSignal) notice.exit_signal = signal;
  return notice;
}

Result<ExitNotice> ParseExitNotice(const Buffer& message) {
  if (!message.valid()) return InvalidArgument("an empty buffer is not an exit notice");
  return ParseExitNotice(message.span());
}

}  // namespace tocl
