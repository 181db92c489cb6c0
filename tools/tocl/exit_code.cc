#include "exit_code.h"

#include <fmt/format.h>

#include <cstdio>
#include <string>

namespace tocl::cli {

ExitCode ExitCodeFor(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return kExitOk;
    case StatusCode::kNotFound:
      return kExitNoMatch;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
      return kExitUsage;
    default:
      return kExitFailure;
  }
}

int Fail(ExitCode code, std::string_view message) {
  fmt::print(stderr, "tocl: {}\n", message);
  return code;
}

int Fail(const Status& status) {
  const ExitCode code = ExitCodeFor(status);
  // The user's mistakes and "not found" are complete sentences from the
  // daemon (a query error names its position); other codes keep their name.
  const bool sentence = code == kExitNoMatch || status.code() == StatusCode::kInvalidArgument ||
                        status.code() == StatusCode::kUnavailable;
  // Replace embedded line breaks so that the error stays on one line.
  std::string text = sentence ? status.message() : status.ToString();
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return Fail(code, text);
}

}  // namespace tocl::cli
