// Loading toclsd.toml text in the config tests: the config it gives (the
// test fails with the error otherwise) or the error it gives.
#pragma once

#include <catch2/catch.hpp>
#include <string>
#include <string_view>

#include "config.h"

namespace tocl::daemon {

// `text` loaded over `config` (the defaults unless given).
inline DaemonConfig MustLoad(std::string_view text, DaemonConfig config = {}) {
  Status status = LoadConfigText(text, "test.toml", config);
  INFO("toml:\n" << text);
  REQUIRE(status.message() == "");
  return config;
}

// The message of the InvalidArgument that loading `text` must give.
inline std::string LoadError(std::string_view text) {
  DaemonConfig config;
  Status status = LoadConfigText(text, "test.toml", config);
  INFO("toml:\n" << text);
  REQUIRE_FALSE(status.ok());
  CHECK(status.code() == StatusCode::kInvalidArgument);
  return status.message();
}

}  // namespace tocl::daemon
