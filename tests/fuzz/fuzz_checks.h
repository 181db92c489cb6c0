// The properties each fuzz target checks, as plain functions: the libFuzzer
// targets (fuzz_target.cc) call them on generated inputs, and the regression
// test (tests/unit/fuzz_regressions_test.cc) calls them on every input kept
// under tests/fuzz/regressions/ and tests/fuzz/seeds/, so a property is
// written once.
//
// Each function takes arbitrary bytes and returns
//   kAccepted  the code under test accepted the input, every property held;
//   kRejected  it refused the input with a proper error, every property held;
//   Internal   a property was broken; the message says which, with the
//              values involved.
// A crash, a sanitizer report or an escaping exception is a finding too:
// libFuzzer reports those itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "tocl/status.h"

namespace tocl::fuzz {

enum class Verdict : uint8_t { kAccepted, kRejected };

// wire::DecodeHeader and ValidateHeader on the bytes of a frame header.
Result<Verdict> CheckFrameDecoder(std::span<const std::byte> input);

// directory::query::Parse on the bytes as query text, then ToString,
// Parse again and Compile.
Result<Verdict> CheckQueryParser(std::span<const std::byte> input);

// Gid::Parse on the bytes as text, and Gid::ToString on the first 8 bytes as
// a raw id.
Result<Verdict> CheckGidParser(std::span<const std::byte> input);

// daemon::LoadConfigText and FinishConfig on the bytes as TOML, then
// ConfigToToml and back.
Result<Verdict> CheckConfigLoader(std::span<const std::byte> input);

}  // namespace tocl::fuzz
