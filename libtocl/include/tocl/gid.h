// tocl::Gid: the global id of a host, process or thread.
//
// 64 bits, hierarchical: host:16 | process:24 | thread:24. A process id has
// thread 0 and a host id has process 0 and thread 0, so the host and process
// of any thread are read off its id with no lookup. Index 0 at a level means
// "this level is absent"; host 0 is never valid.
//
// Text form: "h3" (host), "h3.p17" (process), "h3.p17.t5" (thread), decimal
// indexes without leading zeros. Parse() rejects anything else with a
// message that says what is wrong.
//
// A value type: copy it freely; safe to share between threads.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "tocl/export.h"
#include "tocl/status.h"

namespace tocl {

class TOCL_EXPORT Gid {
 public:
  static constexpr int kHostBits = 16;
  static constexpr int kProcessBits = 24;
  static constexpr int kThreadBits = 24;
  static constexpr uint32_t kMaxHost = (1u << kHostBits) - 1;
  static constexpr uint32_t kMaxProcess = (1u << kProcessBits) - 1;
  static constexpr uint32_t kMaxThread = (1u << kThreadBits) - 1;

  // The null id: not a valid entity, used as "none".
  constexpr Gid() = default;

  static constexpr Gid FromRaw(uint64_t raw) { return Gid(raw); }
  // Callers keep indexes in range (checked in debug builds): use Parse() or
  // Make() for untrusted input.
  static constexpr Gid Host(uint32_t host) { return Gid(uint64_t{host} << 48); }
  static constexpr Gid Process(uint32_t host, uint32_t process) {
    return Gid((uint64_t{host} << 48) | (uint64_t{process} << 24));
  }
  static constexpr Gid Thread(uint32_t host, uint32_t process, uint32_t thread) {
    return Gid((uint64_t{host} << 48) | (uint64_t{process} << 24) | thread);
  }
  // Thread `thread` of `process` (a process id): how a process numbers its
  // own threads.
  static constexpr Gid Thread(Gid process, uint32_t thread) {
    return Thread(process.host_index(), process.process_index(), thread);
  }

  // Builds a valid id from indexes, or says which index is out of range.
  static Result<Gid> Make(uint32_t host, uint32_t process = 0, uint32_t thread = 0);

  // Parses "h3", "h3.p17" or "h3.p17.t5".
  static Result<Gid> Parse(std::string_view text);

  constexpr uint64_t raw() const { return raw_; }
  constexpr uint32_t host_index() const { return static_cast<uint32_t>(raw_ >> 48); }
  constexpr uint32_t process_index() const {
    return static_cast<uint32_t>((raw_ >> 24) & kMaxProcess);
  }
  constexpr uint32_t thread_index() const { return static_cast<uint32_t>(raw_ & kMaxThread); }

  // The host this id lives on (h3 for h3.p17.t5).
  constexpr Gid host() const { return Gid(raw_ & (uint64_t{kMaxHost} << 48)); }
  // The process this id belongs to (h3.p17 for h3.p17.t5); null for a host.
  constexpr Gid process() const {
    return process_index() == 0 ? Gid() : Gid(raw_ & ~uint64_t{kMaxThread});
  }

  constexpr bool is_null() const { return raw_ == 0; }
  // Well-formed: a host, and no thread without a process.
  constexpr bool valid() const {
    return host_index() != 0 && !(process_index() == 0 && thread_index() != 0);
  }
  constexpr bool is_host() const { return valid() && process_index() == 0; }
  constexpr bool is_process() const {
    return valid() && process_index() != 0 && thread_index() == 0;
  }
  constexpr bool is_thread() const { return valid() && thread_index() != 0; }

  // "h3.p17.t5"; "null" for the null id; "invalid(0x...)" for a malformed raw id.
  std::string ToString() const;

  friend constexpr auto operator<=>(Gid, Gid) = default;

 private:
  explicit constexpr Gid(uint64_t raw) : raw_(raw) {}
  uint64_t raw_ = 0;
};

}  // namespace tocl

template <>
struct std::hash<tocl::Gid> {
  size_t operator()(tocl::Gid gid) const noexcept { return std::hash<uint64_t>{}(gid.raw()); }
};
