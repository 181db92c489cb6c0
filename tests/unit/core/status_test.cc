#include "tocl/status.h"

#include <catch2/catch.hpp>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace tocl {
namespace {

constexpr StatusCode kAllCodes[] = {
    StatusCode::kOk,
    StatusCode::kCancelled,
    StatusCode::kInvalidArgument,
    StatusCode::kNotFound,
    StatusCode::kAlreadyExists,
    StatusCode::kPermissionDenied,
    StatusCode::kFailedPrecondition,
    StatusCode::kResourceExhausted,
    StatusCode::kOutOfRange,
    StatusCode::kUnavailable,
    StatusCode::kDeadlineExceeded,
    StatusCode::kTryAgain,
    StatusCode::kInProgress,
    StatusCode::kDataLoss,
    StatusCode::kUnimplemented,
    StatusCode::kInternal,
};

TEST_CASE("a default status is ok with no message", "[status]") {
  Status status;
  CHECK(status.ok());
  CHECK(status.code() == StatusCode::kOk);
  CHECK(status.message().empty());
  CHECK(status.ToString() == "ok");
  CHECK(status == Status::Ok());
}

TEST_CASE("an error status keeps its code and message", "[status]") {
  Status status(StatusCode::kNotFound, "no entity h1.p7");
  CHECK_FALSE(status.ok());
  CHECK(status.code() == StatusCode::kNotFound);
  CHECK(status.message() == "no entity h1.p7");
  CHECK(status.ToString() == "not found: no entity h1.p7");
}

TEST_CASE("every status code has its own lower-case name", "[status]") {
  std::set<std::string_view> names;
  for (StatusCode code : kAllCodes) {
    std::string_view name = StatusCodeName(code);
    INFO("code " << static_cast<int>(code) << " is named '" << name << "'");
    CHECK_FALSE(name.empty());
    CHECK(name != "unknown");
    for (char c : name) CHECK(((c >= 'a' && c <= 'z') || c == ' '));
    names.insert(name);
  }
  CHECK(names.size() == std::size(kAllCodes));
  CHECK(StatusCodeName(StatusCode::kInvalidArgument) == "invalid argument");
  CHECK(StatusCodeName(StatusCode::kTryAgain) == "try again");
  CHECK(StatusCodeName(StatusCode::kInProgress) == "in progress");
  CHECK(StatusCodeName(static_cast<StatusCode>(999)) == "unknown");
}

TEST_CASE("the shorthands make statuses of their codes", "[status]") {
  struct Case {
    Status status;
    StatusCode code;
    std::string text;
  };
  for (const Case& c : {
           Case{InvalidArgument("m"), StatusCode::kInvalidArgument, "invalid argument: m"},
           Case{NotFound("m"), StatusCode::kNotFound, "not found: m"},
           Case{AlreadyExists("m"), StatusCode::kAlreadyExists, "already exists: m"},
           Case{PermissionDenied("m"), StatusCode::kPermissionDenied, "permission denied: m"},
           Case{FailedPrecondition("m"), StatusCode::kFailedPrecondition, "failed precondition: m"},
           Case{ResourceExhausted("m"), StatusCode::kResourceExhausted, "resource exhausted: m"},
           Case{Unavailable("m"), StatusCode::kUnavailable, "unavailable: m"},
           Case{DeadlineExceeded("m"), StatusCode::kDeadlineExceeded, "deadline exceeded: m"},
           Case{Internal("m"), StatusCode::kInternal, "internal: m"},
           Case{DataLoss("m"), StatusCode::kDataLoss, "data loss: m"},
       }) {
    CHECK(c.status.code() == c.code);
    CHECK(c.status.message() == "m");
    CHECK(c.status.ToString() == c.text);
  }
}

TEST_CASE("context prefixes the message and keeps the code", "[status]") {
  Status status = NotFound("no entity h1.p7").WithContext("lookup").WithContext("rpc");
  CHECK(status.code() == StatusCode::kNotFound);
  CHECK(status.message() == "rpc: lookup: no entity h1.p7");
  CHECK(status.ToString() == "not found: rpc: lookup: no entity h1.p7");
}

TEST_CASE("context on an ok status leaves it ok and empty", "[status]") {
  Status status = Status::Ok().WithContext("open db");
  CHECK(status.ok());
  CHECK(status.message().empty());
  CHECK(status.ToString() == "ok");
}

TEST_CASE("statuses are equal only with the same code and message", "[status]") {
  CHECK(NotFound("x") == NotFound("x"));
  CHECK_FALSE(NotFound("x") == NotFound("y"));
  CHECK_FALSE(NotFound("x") == Internal("x"));
  CHECK_FALSE(Status::Ok() == Status(StatusCode::kOk, "note"));
}

TEST_CASE("a result holds a value and an ok status", "[status]") {
  Result<int> result = 42;
  REQUIRE(result.ok());
  CHECK(static_cast<bool>(result));
  CHECK(result.status().ok());
  CHECK(*result == 42);
  CHECK(result.value() == 42);
  CHECK(result.value_or(7) == 42);
  *result = 43;
  CHECK(result.value() == 43);
}

TEST_CASE("a failed result holds its error and falls back", "[status]") {
  Result<int> result = NotFound("nothing here");
  CHECK_FALSE(result.ok());
  CHECK_FALSE(static_cast<bool>(result));
  CHECK(result.status() == NotFound("nothing here"));
  CHECK(result.value_or(7) == 7);
}

TEST_CASE("a result can hold a move-only value and give it up", "[status]") {
  Result<std::unique_ptr<std::string>> result = std::make_unique<std::string>("payload");
  REQUIRE(result.ok());
  CHECK(result->get() != nullptr);
  CHECK(**result == "payload");
  std::unique_ptr<std::string> taken = std::move(result).value();
  REQUIRE(taken != nullptr);
  CHECK(*taken == "payload");
}

TEST_CASE("a result's members are reachable through the arrow", "[status]") {
  Result<std::string> result = std::string("abc");
  REQUIRE(result.ok());
  CHECK(result->size() == 3);
  const Result<std::string>& view = result;
  CHECK(view->front() == 'a');
  CHECK(*view == "abc");
}

// Helpers for the macros: each records that it ran, so a test can see where
// a propagated error stopped the function.
Status Step(std::vector<int>& ran, int id, Status status) {
  ran.push_back(id);
  return status;
}

Status ThreeSteps(std::vector<int>& ran, Status second) {
  TOCL_RETURN_IF_ERROR(Step(ran, 1, Status::Ok()));
  TOCL_RETURN_IF_ERROR(Step(ran, 2, std::move(second)));
  TOCL_RETURN_IF_ERROR(Step(ran, 3, Status::Ok()));
  return Status::Ok();
}

TEST_CASE("TOCL_RETURN_IF_ERROR returns the first error and runs nothing after it", "[status]") {
  std::vector<int> ran;
  Status status = ThreeSteps(ran, PermissionDenied("step two"));
  CHECK(status == PermissionDenied("step two"));
  CHECK(ran == std::vector<int>{1, 2});
}

TEST_CASE("TOCL_RETURN_IF_ERROR passes over ok statuses", "[status]") {
  std::vector<int> ran;
  CHECK(ThreeSteps(ran, Status::Ok()).ok());
  CHECK(ran == std::vector<int>{1, 2, 3});
}

Result<int> Half(int n) {
  if (n % 2 != 0) return InvalidArgument(std::to_string(n) + " is odd");
  return n / 2;
}

// Two uses on different lines, one declaring and one assigning.
Result<int> Quarter(int n, std::vector<int>& seen) {
  TOCL_ASSIGN_OR_RETURN(int half, Half(n));
  seen.push_back(half);
  int quarter = 0;
  TOCL_ASSIGN_OR_RETURN(quarter, Half(half));
  seen.push_back(quarter);
  return quarter;
}

TEST_CASE("TOCL_ASSIGN_OR_RETURN assigns the value and carries on", "[status]") {
  std::vector<int> seen;
  Result<int> result = Quarter(12, seen);
  REQUIRE(result.ok());
  CHECK(*result == 3);
  CHECK(seen == std::vector<int>{6, 3});
}

TEST_CASE("TOCL_ASSIGN_OR_RETURN returns the error where it happens", "[status]") {
  std::vector<int> seen;
  Result<int> first = Quarter(7, seen);
  CHECK(first.status() == InvalidArgument("7 is odd"));
  CHECK(seen.empty());

  Result<int> second = Quarter(10, seen);
  CHECK(second.status() == InvalidArgument("5 is odd"));
  CHECK(seen == std::vector<int>{5});
}

Status AssignInStatusFunction(int n, int& out) {
  TOCL_ASSIGN_OR_RETURN(out, Half(n));
  return Status::Ok();
}

TEST_CASE("TOCL_ASSIGN_OR_RETURN works in a function returning Status", "[status]") {
  int out = -1;
  CHECK(AssignInStatusFunction(8, out).ok());
  CHECK(out == 4);
  out = -1;
  CHECK(AssignInStatusFunction(3, out) == InvalidArgument("3 is odd"));
  CHECK(out == -1);  // outputs are written only on success
}

Result<std::unique_ptr<int>> MakeBox(bool ok) {
  if (!ok) return Unavailable("no box");
  return std::make_unique<int>(5);
}

Result<int> OpenBox(bool ok) {
  TOCL_ASSIGN_OR_RETURN(std::unique_ptr<int> box, MakeBox(ok));
  return *box;
}

TEST_CASE("TOCL_ASSIGN_OR_RETURN moves a move-only value out", "[status]") {
  Result<int> opened = OpenBox(true);
  REQUIRE(opened.ok());
  CHECK(*opened == 5);
  CHECK(OpenBox(false).status() == Unavailable("no box"));
}

}  // namespace
}  // namespace tocl
