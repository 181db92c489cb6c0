#include "runtime/runtime_options.h"

#include <errno.h>
#include <fmt/format.h>

#include <bit>
#include <fstream>
#include <optional>

#include "buffers/size_class.h"
#include "core/environment.h"
#include "core/parse_number.h"
#include "core/split_list.h"
#include "subsystem/transport_registry.h"
#include "tocl/directory_client.h"
#include "tocl/entity.h"

namespace tocl::runtime {

Result<ResolvedOptions> ResolveOptions(const RuntimeOptions& options) {
  ResolvedOptions resolved;
  resolved.options = options;
  RuntimeOptions& filled = resolved.options;
  if (filled.daemon_address.empty()) filled.daemon_address = DirectoryClient::DefaultAddress();
  filled.networks = ValueOrEnvironment(options.networks, "TOCL_NETWORKS");
  if (filled.networks.empty()) {
    // The older spelling: subsystems and the tcp address.
    const std::string subsystems = ValueOrEnvironment(options.subsystems, "TOCL_SUBSYSTEMS");
    const std::string bind = ValueOrEnvironment(options.tcp_bind, "TOCL_TCP_BIND");
    if (!subsystems.empty() || !bind.empty()) {
      TOCL_ASSIGN_OR_RETURN(filled.networks,
                            subsystem::NetworksFromOlderSpelling(subsystems, bind));
    }
  }

  filled.peer_daemons = ValueOrEnvironment(options.peer_daemons, "TOCL_PEER_DAEMONS");
  for (std::string_view entry : SplitList(filled.peer_daemons)) {
    const size_t equals = entry.find('=');
    const std::optional<uint32_t> host = equals == std::string_view::npos
                                             ? std::nullopt
                                             : ParseNumber<uint32_t>(entry.substr(0, equals));
    if (!host || *host == 0 || *host > Gid::kMaxHost || equals + 1 == entry.size()) {
      return InvalidArgument(fmt::format("bad peer daemon '{}' in '{}' (expected HOSTID=ADDRESS)",
                                         entry, filled.peer_daemons));
    }
    resolved.peer_daemons[*host] = std::string(entry.substr(equals + 1));
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
  TOCL_RETURN_IF_ERROR(subsystem::CompiledTransports().ResolveOptions(filled));
  if (options.spin.count() < 0) return InvalidArgument("spin must not be negative");
  for (const auto& [name, value] :
       {std::pair{"fragment_timeout", options.fragment_timeout},
        std::pair{"partial_timeout", options.partial_timeout},
        std::pair{"connect_timeout", options.connect_timeout},
        std::pair{"unreachable_timeout", options.unreachable_timeout}}) {
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

std::string ProgramName() {
  std::string name = program_invocation_short_name;
  if (name.empty() || !ValidateName("process", name).ok()) {
    std::ifstream in("/proc/self/comm");
    std::getline(in, name);
  }
  return name.empty() ? "tocl" : name;
}

Result<Gid> ParentFromEnvironment() {
  const std::string text = FromEnvironment("TOCL_PARENT");
  if (text.empty()) return Gid();
  auto parent = Gid::Parse(text);
  if (!parent.ok() || !parent->is_thread()) {
    return InvalidArgument(
        fmt::format("TOCL_PARENT='{}' is not a thread id (h1.p2.t3): {}", text,
                    parent.ok() ? "it names a host or process" : parent.status().message()));
  }
  return *parent;
}

}  // namespace tocl::runtime
