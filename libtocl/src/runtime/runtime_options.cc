#include "runtime/runtime_options.h"

#include <fmt/format.h>

#include <bit>
#include <charconv>
#include <cstdlib>

#include "buffers/size_class.h"
#include "core/split_list.h"
#include "subsystem/transport_registry.h"
#include "tocl/directory_client.h"

namespace tocl::runtime {

namespace {

std::string FromEnv(const std::string& value, const char* name, std::string fallback) {
  if (!value.empty()) return value;
  const char* env = std::getenv(name);
  return env != nullptr && *env != '\0' ? std::string(env) : std::move(fallback);
}

}  // namespace

Result<ResolvedOptions> ResolveOptions(const RuntimeOptions& options) {
  ResolvedOptions resolved;
  resolved.daemon_address =
      options.daemon_address.empty() ? DirectoryClient::DefaultAddress() : options.daemon_address;
  resolved.networks = FromEnv(options.networks, "TOCL_NETWORKS", "");
  if (resolved.networks.empty()) {
    // The older spelling: subsystems and the tcp address.
    const std::string subsystems = FromEnv(options.subsystems, "TOCL_SUBSYSTEMS", "");
    const std::string bind = FromEnv(options.tcp_bind, "TOCL_TCP_BIND", "");
    if (!subsystems.empty() || !bind.empty()) {
      TOCL_ASSIGN_OR_RETURN(resolved.networks,
                            subsystem::NetworksFromOlderSpelling(subsystems, bind));
    }
  }

  const std::string peers = FromEnv(options.peer_daemons, "TOCL_PEER_DAEMONS", "");
  for (std::string_view peer : SplitList(peers)) {
    const std::string entry(peer);
    const size_t equals = entry.find('=');
    uint32_t host = 0;
    const char* first = entry.data();
    auto [end, ec] =
        std::from_chars(first, first + (equals == std::string::npos ? 0 : equals), host);
    if (equals == std::string::npos || ec != std::errc() || end != first + equals || host == 0 ||
        host > Gid::kMaxHost || equals + 1 == entry.size()) {
      return InvalidArgument(
          fmt::format("bad peer daemon '{}' in '{}' (expected HOSTID=ADDRESS)", entry, peers));
    }
    resolved.peer_daemons[host] = entry.substr(equals + 1);
  }

  const size_t max = options.short_max;
  if (!std::has_single_bit(max) || max < buffers::ClassBytes(0) ||
      max > buffers::ClassBytes(buffers::kMaxClasses - 1)) {
    return InvalidArgument(
        fmt::format("short_max must be a power of two from {} to {} bytes, not {}",
                    buffers::ClassBytes(0), buffers::ClassBytes(buffers::kMaxClasses - 1), max));
  }
  resolved.num_classes = static_cast<uint32_t>(std::countr_zero(max)) - buffers::kMinClassShift + 1;
  if (options.pool_cap < max * 4) {
    return InvalidArgument(
        fmt::format("pool_cap of {} bytes is below 4 x short_max", options.pool_cap));
  }
  if (options.send_queue_depth == 0) return InvalidArgument("send_queue_depth must be at least 1");
  // Each network kind's own settings.
  resolved.options = options;
  TOCL_RETURN_IF_ERROR(subsystem::CompiledTransports().ResolveOptions(resolved.options));
  if (options.spin.count() < 0) return InvalidArgument("spin must not be negative");
  for (const auto& [name, value] : {std::pair{"fragment_timeout", options.fragment_timeout},
                                    std::pair{"partial_timeout", options.partial_timeout},
                                    std::pair{"connect_timeout", options.connect_timeout}}) {
    if (value.count() <= 0) {
      return InvalidArgument(fmt::format("{} must be positive, not {} ms", name, value.count()));
    }
  }
  // A network is failed after fragment_timeout and its fragments go over
  // another: a Send must not give up before that could happen.
  if (options.partial_timeout < 2 * options.fragment_timeout) {
    return InvalidArgument(
        fmt::format("partial_timeout ({} ms) must be at least twice fragment_timeout ({} ms)",
                    options.partial_timeout.count(), options.fragment_timeout.count()));
  }
  return resolved;
}

}  // namespace tocl::runtime
