#include "runtime/runtime_options.h"

#include <fmt/format.h>

#include <bit>
#include <cstdlib>

#include "buffers/size_class.h"
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
  resolved.tcp_bind = FromEnv(options.tcp_bind, "TOCL_TCP_BIND", "127.0.0.1");

  const std::string subsystems = FromEnv(options.subsystems, "TOCL_SUBSYSTEMS", "shm,tcp");
  resolved.shm = resolved.tcp = false;
  size_t start = 0;
  while (start <= subsystems.size()) {
    size_t comma = subsystems.find(',', start);
    if (comma == std::string::npos) comma = subsystems.size();
    std::string name = subsystems.substr(start, comma - start);
    if (name == "shm") {
      resolved.shm = true;
    } else if (name == "tcp") {
      resolved.tcp = true;
    } else if (!name.empty()) {
      return InvalidArgument(
          fmt::format("unknown subsystem '{}' in '{}' (known: shm, tcp)", name, subsystems));
    }
    start = comma + 1;
  }
  if (!resolved.shm && !resolved.tcp) {
    return InvalidArgument(fmt::format("no subsystem enabled by '{}'", subsystems));
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
  if (options.spin.count() < 0) return InvalidArgument("spin must not be negative");
  return resolved;
}

}  // namespace tocl::runtime
