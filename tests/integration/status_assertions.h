// Catch2 assertions on tocl::Status and tocl::Result<T> that print the
// error when they fail.
//
//   REQUIRE_OK(daemon.Start());
//   auto client = REQUIRE_VALUE(daemon.Connect());   // the value, or the test stops
//   CHECK_OK(session->RegisterThreads(threads));
#pragma once

#include <catch2/catch.hpp>
#include <string>
#include <string_view>
#include <utility>

#include "tocl/status.h"

namespace tocl::testing {

inline const Status& AsStatus(const Status& status) {
  return status;
}
template <typename T>
Status AsStatus(const Result<T>& result) {
  return result.status();
}

// Whether `status`'s message holds `words` (an error's wording checked in
// part: the rest names ids and reasons a test does not fix).
inline bool MessageContains(const Status& status, std::string_view words) {
  return status.message().find(words) != std::string::npos;
}

}  // namespace tocl::testing

#define TOCL_STATUS_ASSERT_(macro, expr)                                   \
  do {                                                                     \
    const ::tocl::Status tocl_status_ = ::tocl::testing::AsStatus((expr)); \
    INFO(#expr " -> " << tocl_status_.ToString());                         \
    macro(tocl_status_.ok());                                              \
  } while (false)

#define REQUIRE_OK(expr) TOCL_STATUS_ASSERT_(REQUIRE, expr)
#define CHECK_OK(expr) TOCL_STATUS_ASSERT_(CHECK, expr)

// Evaluates to the value of a Result; stops the test when there is none.
#define REQUIRE_VALUE(expr)                                 \
  ([&]() {                                                  \
    auto tocl_result_ = (expr);                             \
    INFO(#expr " -> " << tocl_result_.status().ToString()); \
    REQUIRE(tocl_result_.ok());                             \
    return std::move(tocl_result_).value();                 \
  }())
