// MappingCache: freed long-message mappings kept for the next message, so
// that receiving into library memory does not fault on every page.
#include "buffers/mapping_cache.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <catch2/catch.hpp>
#include <cstring>

#include "buffers/large_slot.h"

namespace tocl::buffers {
namespace {

MappingCache::Mapping Map(size_t bytes) {
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(memory != MAP_FAILED);
  return {memory, bytes};
}

long MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_minflt;
}

constexpr size_t kMiB = size_t{1} << 20;

TEST_CASE("a kept mapping is taken again for a message of about its size", "[buffers]") {
  MappingCache cache(64 * kMiB);
  CHECK(cache.Take(4 * kMiB).memory == nullptr);
  MappingCache::Mapping mapping = Map(4 * kMiB);
  cache.Keep(mapping);
  CHECK(cache.kept_bytes() == 4 * kMiB);
  // Not for a message it is too small for, nor one under half its size.
  CHECK(cache.Take(4 * kMiB + 1).memory == nullptr);
  CHECK(cache.Take(2 * kMiB - 1).memory == nullptr);
  MappingCache::Mapping taken = cache.Take(3 * kMiB);
  CHECK(taken.memory == mapping.memory);
  CHECK(taken.bytes == 4 * kMiB);
  CHECK(cache.kept_bytes() == 0);
  CHECK(cache.Take(3 * kMiB).memory == nullptr);
  cache.Keep(taken);
}

TEST_CASE("the smallest kept mapping that fits is taken", "[buffers]") {
  MappingCache cache(64 * kMiB);
  MappingCache::Mapping large = Map(8 * kMiB);
  MappingCache::Mapping small = Map(5 * kMiB);
  cache.Keep(large);
  cache.Keep(small);
  CHECK(cache.Take(5 * kMiB).memory == small.memory);
  CHECK(cache.Take(5 * kMiB).memory == large.memory);
  cache.Keep(small);
  cache.Keep(large);
}

TEST_CASE("the cache keeps at most its cap and its count, the oldest going first", "[buffers]") {
  MappingCache cache(10 * kMiB);
  MappingCache::Mapping first = Map(4 * kMiB);
  MappingCache::Mapping second = Map(4 * kMiB);
  MappingCache::Mapping third = Map(4 * kMiB);
  cache.Keep(first);
  cache.Keep(second);
  cache.Keep(third);  // 12 MiB would pass the cap: the first is unmapped
  CHECK(cache.kept_bytes() == 8 * kMiB);
  MappingCache::Mapping a = cache.Take(4 * kMiB);
  MappingCache::Mapping b = cache.Take(4 * kMiB);
  CHECK(cache.Take(4 * kMiB).memory == nullptr);
  CHECK(((a.memory == second.memory && b.memory == third.memory) ||
         (a.memory == third.memory && b.memory == second.memory)));
  // One larger than the whole cap is not kept at all.
  cache.Keep(Map(11 * kMiB));
  CHECK(cache.kept_bytes() == 0);
  for (size_t i = 0; i < MappingCache::kMaxKept + 3; ++i) cache.Keep(Map(4096));
  CHECK(cache.kept_bytes() == MappingCache::kMaxKept * 4096);
  cache.Keep(a);
  cache.Keep(b);
}

TEST_CASE("writing a message into a kept mapping takes no page faults", "[buffers]") {
  constexpr size_t kBytes = 4 * kMiB;
  MappingCache cache(64 * kMiB);
  // A fresh mapping faults on about every page it is written to ...
  MappingCache::Mapping mapping = Map(kBytes);
  // Small pages, whatever the system's transparent huge page setting.
  REQUIRE(madvise(mapping.memory, kBytes, MADV_NOHUGEPAGE) == 0);
  long before = MinorFaults();
  std::memset(mapping.memory, 0x5a, kBytes);
  const long fresh = MinorFaults() - before;
  CHECK(fresh >= static_cast<long>(kBytes / 4096 / 2));
  cache.Keep(mapping);
  // ... a kept one, written again, does not.
  MappingCache::Mapping again = cache.Take(kBytes);
  REQUIRE(again.memory == mapping.memory);
  before = MinorFaults();
  std::memset(again.memory, 0xa5, kBytes);
  const long kept = MinorFaults() - before;
  INFO("faults: " << fresh << " fresh, " << kept << " kept");
  CHECK(kept < fresh / 8);
  cache.Keep(again);
}

TEST_CASE("mappings unused since a given time are unmapped, newer ones kept", "[buffers]") {
  MappingCache cache(64 * kMiB);
  cache.Keep(Map(kMiB));
  const auto between = MappingCache::Clock::now();
  // Kept after `between` (the clock is monotonic; wait for it to move on).
  while (MappingCache::Clock::now() == between) {
  }
  MappingCache::Mapping newer = Map(2 * kMiB);
  cache.Keep(newer);
  cache.ReleaseUnusedBefore(between);
  CHECK(cache.kept_bytes() == 2 * kMiB);  // the 1 MiB one is gone
  cache.ReleaseUnusedBefore(MappingCache::Clock::now() + std::chrono::seconds(1));
  CHECK(cache.kept_bytes() == 0);
  CHECK(cache.Take(2 * kMiB).memory == nullptr);
}

TEST_CASE("a large slot's mapping goes back to its cache and its payload is reported",
          "[buffers]") {
  MappingCache cache(64 * kMiB);
  uint64_t freed = 0;
  auto slot = NewLargeSlot(nullptr, 3 * kMiB, &cache, [&](uint64_t bytes) { freed = bytes; });
  REQUIRE(slot.ok());
  std::byte* memory = (*slot)->bytes;
  (*slot)->header().total = 100;  // a Buffer shrunk by its user
  FreeLargeSlot(*slot);
  CHECK(freed == 3 * kMiB);
  CHECK(cache.kept_bytes() >= 3 * kMiB);
  auto next = NewLargeSlot(nullptr, 3 * kMiB - 10, &cache, nullptr);
  REQUIRE(next.ok());
  CHECK((*next)->bytes == memory);
  CHECK((*next)->header().total == 3 * kMiB - 10);
  FreeLargeSlot(*next);
}

}  // namespace
}  // namespace tocl::buffers
