#include "keygen_command.h"

#include <fmt/format.h>

#include <ranges>
#include <string_view>

#include "exit_code.h"
#include "security/keygen.h"

namespace tocl::cli {
namespace {

// "NAME" or "NAME=EXTRA,EXTRA".
Result<security::KeygenHost> ParseHost(std::string_view spec) {
  security::KeygenHost host;
  const size_t equals = spec.find('=');
  host.name = std::string(spec.substr(0, equals));
  if (equals == std::string_view::npos) return host;
  for (const auto part : std::views::split(spec.substr(equals + 1), ',')) {
    std::string name(part.begin(), part.end());
    if (name.empty()) {
      return InvalidArgument(
          fmt::format("--host '{}': an empty extra name (NAME=EXTRA,EXTRA...)", spec));
    }
    host.extra_names.push_back(std::move(name));
  }
  if (host.extra_names.empty()) {
    return InvalidArgument(fmt::format("--host '{}': no names after '='", spec));
  }
  return host;
}

}  // namespace

int RunKeygen(const KeygenCommand& command) {
  security::KeygenOptions options;
  options.directory = command.directory;
  options.valid_days = command.days;
  for (const std::string& spec : command.hosts) {
    Result<security::KeygenHost> host = ParseHost(spec);
    if (!host.ok()) return Fail(host.status());
    options.hosts.push_back(std::move(*host));
  }
  Result<std::vector<std::string>> written = security::GenerateCredentials(options);
  if (!written.ok()) {
    // A host that has credentials already is the caller's mistake, not a
    // failure of the machine.
    if (written.status().code() == StatusCode::kAlreadyExists) {
      return Fail(kExitUsage, written.status().message());
    }
    return Fail(written.status());
  }
  for (const std::string& path : *written) fmt::print("wrote {}\n", path);
  fmt::print("\nNext:\n");
  for (const security::KeygenHost& host : options.hosts) {
    fmt::print(
        "  - copy {dir}/{host} to host {host} (keep it 0700, key.pem and cluster.secret 0600), "
        "e.g. to /etc/tocl/credentials, and set credentials = \"/etc/tocl/credentials\" in its "
        "toclsd.toml (or toclsd --credentials DIR)\n",
        fmt::arg("dir", command.directory), fmt::arg("host", host.name));
  }
  fmt::print(
      "  - tools on a host reach remote daemons with its credentials: tocl --credentials DIR, or "
      "TOCL_CREDENTIALS=DIR\n"
      "  - keep {dir}/ca/ca.key off the hosts: whoever holds it can make members of this "
      "cluster; `tocl keygen {dir} --host NEW` reuses it for a host added later\n",
      fmt::arg("dir", command.directory));
  return kExitOk;
}

}  // namespace tocl::cli
