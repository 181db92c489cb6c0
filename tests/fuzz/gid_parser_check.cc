// Gid's text form (tocl/gid.h): Parse accepts exactly the canonical text of
// valid ids ("h3", "h3.p17", "h3.p17.t5", no leading zeros), so accepted text
// is its own ToString; and every valid id's ToString parses back to it.
#include <algorithm>
#include <cstring>
#include <string>

#include "check_support.h"
#include "fuzz_checks.h"
#include "tocl/gid.h"

namespace tocl::fuzz {
namespace {

// What the hierarchy promises of any valid id.
Status CheckShape(Gid gid) {
  const std::string text = gid.ToString();
  TOCL_FUZZ_EXPECT(gid.is_host() + gid.is_process() + gid.is_thread() == 1, "{}", text);
  TOCL_FUZZ_EXPECT(gid.host().is_host() && gid.host().host_index() == gid.host_index(), "{}", text);
  if (gid.is_host()) TOCL_FUZZ_EXPECT(gid.process().is_null() && gid.host() == gid, "{}", text);
  if (gid.is_process()) TOCL_FUZZ_EXPECT(gid.process() == gid, "{}", text);
  if (gid.is_thread()) {
    TOCL_FUZZ_EXPECT(gid.process().is_process(), "{}", text);
    TOCL_FUZZ_EXPECT(Gid::Thread(gid.process(), gid.thread_index()) == gid, "{}", text);
  }
  Result<Gid> made = Gid::Make(gid.host_index(), gid.process_index(), gid.thread_index());
  TOCL_FUZZ_EXPECT(made.ok() && *made == gid, "{}: {}", text, made.status().ToString());
  return Status::Ok();
}

}  // namespace

Result<Verdict> CheckGidParser(std::span<const std::byte> input) {
  const std::string_view text = AsText(input);
  Verdict verdict = Verdict::kRejected;
  Result<Gid> parsed = Gid::Parse(text);
  if (parsed.ok()) {
    const Gid gid = *parsed;
    TOCL_FUZZ_EXPECT(gid.valid(), "'{}' parsed to {:#x}", Escaped(text), gid.raw());
    // Non-canonical forms ("h03", "h3.p0", " h3") are refused, so accepted
    // text is exactly the id's text.
    TOCL_FUZZ_EXPECT(gid.ToString() == text, "'{}' parsed to {}", Escaped(text), gid.ToString());
    const auto dots = std::count(text.begin(), text.end(), '.');
    TOCL_FUZZ_EXPECT(dots == (gid.is_host() ? 0 : gid.is_process() ? 1 : 2), "{}", text);
    TOCL_RETURN_IF_ERROR(CheckShape(gid));
    verdict = Verdict::kAccepted;
  } else {
    TOCL_FUZZ_EXPECT(parsed.status().code() == StatusCode::kInvalidArgument, "'{}': {}",
                     Escaped(text), parsed.status().ToString());
    // Every message names the text it refused.
    TOCL_FUZZ_EXPECT(parsed.status().message().starts_with("bad id '"), "'{}': {}", Escaped(text),
                     Escaped(parsed.status().message()));
  }

  // The same bytes as a raw id (zero-padded): ToString and back.
  uint64_t raw = 0;
  std::memcpy(&raw, input.data(), std::min(input.size(), sizeof(raw)));
  const Gid gid = Gid::FromRaw(raw);
  const std::string text_of_raw = gid.ToString();
  Result<Gid> reparsed = Gid::Parse(text_of_raw);
  if (gid.valid()) {
    TOCL_FUZZ_EXPECT(reparsed.ok() && *reparsed == gid, "{:#x} -> '{}' -> {}", raw, text_of_raw,
                     reparsed.ok() ? reparsed->ToString() : reparsed.status().ToString());
    TOCL_RETURN_IF_ERROR(CheckShape(gid));
  } else {
    // "null" and "invalid(0x...)" are for logs: never ids.
    TOCL_FUZZ_EXPECT(!reparsed.ok(), "{:#x} -> '{}' parsed", raw, text_of_raw);
    TOCL_FUZZ_EXPECT(!gid.is_host() && !gid.is_process() && !gid.is_thread(), "{:#x}", raw);
  }
  return verdict;
}

}  // namespace tocl::fuzz
