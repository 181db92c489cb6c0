// Which daemon answers for a gid: its own host's when ours is in no cluster
// and the application named the other hosts' daemons
// (RuntimeOptions::peer_daemons), else ours (in a cluster every daemon holds
// a replica of every host's rows).
//
// The clients of other hosts' daemons are connected on first use and kept.
//
// Threading: Lookup from any thread; it blocks on the daemon's answer (and
// on the first connection to another host's daemon).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "tocl/directory_client.h"

namespace tocl::runtime {

class HostDaemons {
 public:
  // `local`: the process's own daemon (it must outlive this).
  // `peer_daemons`: other hosts' daemon addresses by host index.
  HostDaemons(DirectoryClient& local, Gid process, std::map<uint32_t, std::string> peer_daemons)
      : local_(local), host_(process.host_index()), peer_daemons_(std::move(peer_daemons)) {}
  HostDaemons(const HostDaemons&) = delete;
  HostDaemons& operator=(const HostDaemons&) = delete;

  Result<Entity> Lookup(Gid gid);

 private:
  DirectoryClient& local_;
  const uint32_t host_;
  const std::map<uint32_t, std::string> peer_daemons_;
  std::mutex clients_mu_;
  std::map<uint32_t, std::unique_ptr<DirectoryClient>> clients_;  // guarded by clients_mu_
};

}  // namespace tocl::runtime
