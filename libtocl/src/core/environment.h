// Settings that the environment fills in when the caller leaves them empty
// ($TOCL_NETWORKS for RuntimeOptions::networks, ...). Read on the thread
// that resolves options; getenv is not safe against a concurrent setenv.
#pragma once

#include <string>

namespace tocl {

// $`name`, or `fallback` when it is unset or empty.
std::string FromEnvironment(const char* name, std::string fallback = "");

// `value` when it is not empty (the caller gave it), else
// FromEnvironment(name, fallback).
std::string ValueOrEnvironment(const std::string& value, const char* name,
                               std::string fallback = "");

}  // namespace tocl
