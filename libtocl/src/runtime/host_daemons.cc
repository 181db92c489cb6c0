#include "runtime/host_daemons.h"

namespace tocl::runtime {

Result<Entity> HostDaemons::Lookup(Gid gid) {
  const uint32_t host = gid.host_index();
  auto daemon = peer_daemons_.find(host);
  if (host == host_ || daemon == peer_daemons_.end()) return local_.Lookup(gid);
  DirectoryClient* client = nullptr;
  {
    // Held while connecting: one connection per host, made once.
    std::lock_guard lock(clients_mu_);
    auto& entry = clients_[host];
    if (!entry) {
      TOCL_ASSIGN_OR_RETURN(entry, DirectoryClient::Connect(daemon->second));
    }
    client = entry.get();
  }
  return client->Lookup(gid);
}

}  // namespace tocl::runtime
