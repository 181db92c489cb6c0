// Size classes: which power-of-two buffer a payload needs (header included).
#include "buffers/size_class.h"

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>

namespace tocl::buffers {
namespace {

TEST_CASE("a payload gets the smallest class that holds it with its header", "[pool]") {
  struct Row {
    size_t payload;
    uint32_t class_index;
    size_t class_bytes;
  };
  constexpr Row kTable[] = {
      {0, 0, 256},       {1, 0, 256},        {192, 0, 256},          {193, 1, 512},
      {448, 1, 512},     {449, 2, 1024},     {960, 2, 1024},         {961, 3, 2048},
      {65472, 8, 65536}, {65473, 9, 131072}, {1048512, 12, 1048576},
  };
  for (const Row& row : kTable) {
    INFO("payload " << row.payload);
    CHECK(ClassFor(row.payload) == row.class_index);
    CHECK(ClassBytes(row.class_index) == row.class_bytes);
    CHECK(row.payload + wire::kHeaderBytes <= ClassBytes(ClassFor(row.payload)));
  }
}

TEST_CASE("a payload one byte over the 64 KiB class is past the default nine classes", "[pool]") {
  constexpr uint32_t kDefaultClasses = 9;
  CHECK(ClassFor(65536 - wire::kHeaderBytes) == kDefaultClasses - 1);
  CHECK(ClassFor(65536 - wire::kHeaderBytes + 1) == kDefaultClasses);
  CHECK(ClassFor(size_t{1} << 20) == kMaxClasses);  // past even the largest class
}

TEST_CASE("every class is the tightest fit: half of it would not hold the payload", "[pool]") {
  for (size_t payload = 0; payload <= (size_t{1} << 17); payload += 61) {
    INFO("payload " << payload);
    const uint32_t c = ClassFor(payload);
    CHECK(payload + wire::kHeaderBytes <= ClassBytes(c));
    if (c > 0) CHECK(payload + wire::kHeaderBytes > ClassBytes(c - 1));
  }
}

TEST_CASE("classes run from 256 B to 1 MiB", "[pool]") {
  CHECK(ClassBytes(0) == 256);
  CHECK(ClassBytes(kMaxClasses - 1) == size_t{1} << 20);
  CHECK(kMaxClasses == 13);
}

}  // namespace
}  // namespace tocl::buffers
