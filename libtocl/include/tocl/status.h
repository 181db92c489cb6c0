// tocl::Status and tocl::Result<T>: the one error type of tocl.
//
// Every fallible function returns a Status (or a Result<T> holding a value or
// a non-ok Status). No exceptions cross the library API. "Try again" and
// "in progress" are codes, not failures: callers branch on them.
//
//   tocl::Result<tocl::Gid> gid = tocl::Gid::Parse("h3.p17.t5");
//   if (!gid.ok()) { std::cerr << gid.status().ToString(); return; }
//   use(*gid);
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "tocl/export.h"

namespace tocl {

enum class StatusCode : int {
  kOk = 0,
  kCancelled,
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kPermissionDenied,
  kFailedPrecondition,
  kResourceExhausted,
  kOutOfRange,
  kUnavailable,       // the peer or daemon cannot be reached now
  kDeadlineExceeded,  // a timed wait ran out
  kTryAgain,          // not a failure: nothing available now, call again
  kInProgress,        // not a failure: the operation continues in the background
  kDataLoss,
  kUnimplemented,
  kInternal,
};

// The canonical lower-case name of a code ("invalid argument").
TOCL_EXPORT std::string_view StatusCodeName(StatusCode code);

// TOCL_EXPORT on a declaration of its own: GCC takes no __attribute__ next to
// [[nodiscard]], and a class keeps the visibility of its first declaration.
class TOCL_EXPORT Status;
class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "not found: no entity h1.p7" (or "ok").
  std::string ToString() const;

  // Prefixes the message with context, keeping the code: "open db: ...".
  Status WithContext(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Shorthands: return tocl::NotFound("no entity {}", ...) reads as a sentence.
TOCL_EXPORT Status InvalidArgument(std::string message);
TOCL_EXPORT Status NotFound(std::string message);
TOCL_EXPORT Status AlreadyExists(std::string message);
TOCL_EXPORT Status PermissionDenied(std::string message);
TOCL_EXPORT Status FailedPrecondition(std::string message);
TOCL_EXPORT Status ResourceExhausted(std::string message);
TOCL_EXPORT Status Unavailable(std::string message);
TOCL_EXPORT Status DeadlineExceeded(std::string message);
TOCL_EXPORT Status Internal(std::string message);
TOCL_EXPORT Status DataLoss(std::string message);

// A value or the reason there is none. Accessing the value of a failed
// Result is a programming error (asserted in debug builds).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : state_(std::move(status)) {  // NOLINT: implicit by design
    assert(!std::get<Status>(state_).ok() && "a Result needs a value or an error");
  }

  bool ok() const { return std::holds_alternative<T>(state_); }
  explicit operator bool() const { return ok(); }

  // The error, or Status::Ok() when there is a value.
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(state_); }

  T& value() & {
    assert(ok());
    return std::get<T>(state_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<T>(state_);
  }
  T&& value() && {
    assert(ok());
    return std::get<T>(std::move(state_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  T value_or(T fallback) const& { return ok() ? std::get<T>(state_) : std::move(fallback); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace tocl

// Propagate a non-ok Status to the caller.
#define TOCL_RETURN_IF_ERROR(expr) \
  TOCL_RETURN_IF_ERROR_IMPL_(TOCL_CONCAT_(tocl_status_, __LINE__), expr)
#define TOCL_RETURN_IF_ERROR_IMPL_(tmp, expr) \
  do {                                        \
    ::tocl::Status tmp = (expr);              \
    if (!tmp.ok()) return tmp;                \
  } while (0)

#define TOCL_CONCAT_INNER_(a, b) a##b
#define TOCL_CONCAT_(a, b) TOCL_CONCAT_INNER_(a, b)
#define TOCL_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()

// TOCL_ASSIGN_OR_RETURN(auto gid, Gid::Parse(text));
#define TOCL_ASSIGN_OR_RETURN(lhs, expr) \
  TOCL_ASSIGN_OR_RETURN_IMPL_(TOCL_CONCAT_(tocl_result_, __LINE__), lhs, expr)
