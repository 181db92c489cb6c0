// The libFuzzer entry point of every fuzz target: CMake compiles it once per
// target with TOCL_FUZZ_CHECK set to that target's check function
// (fuzz_checks.h). A broken property aborts, so libFuzzer keeps the input.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "fuzz_checks.h"

#ifndef TOCL_FUZZ_CHECK
#error "TOCL_FUZZ_CHECK names the check function, e.g. CheckGidParser"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> input(reinterpret_cast<const std::byte*>(data), size);
  const tocl::Result<tocl::fuzz::Verdict> verdict = tocl::fuzz::TOCL_FUZZ_CHECK(input);
  if (!verdict.ok()) {
    std::fprintf(stderr, "%s\n", verdict.status().message().c_str());
    std::abort();
  }
  return 0;
}
