#include "tocl/gid.h"

#include <fmt/format.h>

#include <charconv>

namespace tocl {
namespace {

// Reads one level "<letter><decimal>" at the front of `rest`, e.g. "p17".
Result<uint32_t> ParseLevel(std::string_view full, std::string_view& rest, char letter,
                            std::string_view level_name, uint32_t max) {
  const size_t position = full.size() - rest.size();
  if (rest.empty() || rest.front() != letter) {
    return InvalidArgument(
        fmt::format("bad id '{}': expected '{}' at position {}", full, letter, position));
  }
  rest.remove_prefix(1);
  size_t digits = 0;
  while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
  if (digits == 0) {
    return InvalidArgument(
        fmt::format("bad id '{}': expected a {} number after '{}'", full, level_name, letter));
  }
  if (digits > 1 && rest.front() == '0') {
    return InvalidArgument(
        fmt::format("bad id '{}': {} number has a leading zero", full, level_name));
  }
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + digits, value);
  if (ec != std::errc() || value > max) {
    return InvalidArgument(
        fmt::format("bad id '{}': {} number is out of range (1..{})", full, level_name, max));
  }
  if (value == 0) {
    return InvalidArgument(
        fmt::format("bad id '{}': {} number 0 is reserved (1..{})", full, level_name, max));
  }
  rest.remove_prefix(digits);
  return static_cast<uint32_t>(value);
}

// Consumes the '.' between levels; false at the end of the text.
Result<bool> NextLevel(std::string_view full, std::string_view& rest) {
  if (rest.empty()) return false;
  if (rest.front() != '.') {
    return InvalidArgument(fmt::format("bad id '{}': unexpected '{}' at position {}", full,
                                       rest.front(), full.size() - rest.size()));
  }
  rest.remove_prefix(1);
  return true;
}

}  // namespace

Result<Gid> Gid::Make(uint32_t host, uint32_t process, uint32_t thread) {
  if (host == 0 || host > kMaxHost) {
    return InvalidArgument(fmt::format("host index {} is out of range (1..{})", host, kMaxHost));
  }
  if (process > kMaxProcess) {
    return InvalidArgument(
        fmt::format("process index {} is out of range (1..{})", process, kMaxProcess));
  }
  if (thread > kMaxThread) {
    return InvalidArgument(
        fmt::format("thread index {} is out of range (1..{})", thread, kMaxThread));
  }
  if (process == 0 && thread != 0) {
    return InvalidArgument("a thread id needs a process index");
  }
  return Thread(host, process, thread);
}

Result<Gid> Gid::Parse(std::string_view text) {
  if (text.empty())
    return InvalidArgument("bad id '': empty (expected e.g. h3, h3.p17 or h3.p17.t5)");
  std::string_view rest = text;
  TOCL_ASSIGN_OR_RETURN(uint32_t host, ParseLevel(text, rest, 'h', "host", kMaxHost));
  TOCL_ASSIGN_OR_RETURN(bool more, NextLevel(text, rest));
  if (!more) return Host(host);
  TOCL_ASSIGN_OR_RETURN(uint32_t process, ParseLevel(text, rest, 'p', "process", kMaxProcess));
  TOCL_ASSIGN_OR_RETURN(more, NextLevel(text, rest));
  if (!more) return Process(host, process);
  TOCL_ASSIGN_OR_RETURN(uint32_t thread, ParseLevel(text, rest, 't', "thread", kMaxThread));
  if (!rest.empty()) {
    return InvalidArgument(fmt::format("bad id '{}': unexpected '{}' at position {}", text,
                                       rest.front(), text.size() - rest.size()));
  }
  return Thread(host, process, thread);
}

std::string Gid::ToString() const {
  if (is_null()) return "null";
  if (!valid()) return fmt::format("invalid(0x{:016x})", raw_);
  if (is_host()) return fmt::format("h{}", host_index());
  if (is_process()) return fmt::format("h{}.p{}", host_index(), process_index());
  return fmt::format("h{}.p{}.t{}", host_index(), process_index(), thread_index());
}

}  // namespace tocl
