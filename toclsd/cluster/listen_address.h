// The daemon's TCP address, known before its gRPC server starts.
//
// A joining daemon tells the seed its address before it can open its store
// (the seed's answer is its host id), and the store must exist before the
// server that serves it. With `--listen HOST:0` the port is therefore chosen
// here: a socket bound with SO_REUSEPORT holds it until gRPC (which sets
// SO_REUSEPORT on its listeners) has bound the same port, so no other
// process can take it in between.
#pragma once

#include <string>
#include <string_view>

#include "tocl/status.h"

namespace tocl::daemon::cluster {

class ListenAddress {
 public:
  // `listen` is "HOST:PORT" (IPv4, [IPv6] or a name). Port 0 picks a free
  // port and holds it; any other port is taken as given.
  static Result<ListenAddress> Reserve(std::string_view listen);

  ListenAddress() = default;
  ListenAddress(ListenAddress&& other) noexcept;
  ListenAddress& operator=(ListenAddress&& other) noexcept;
  ~ListenAddress();

  // "HOST:PORT" with the real port: what gRPC is told to listen on.
  const std::string& address() const { return address_; }
  // Lets the port go (call once gRPC listens on it).
  void Release();

 private:
  std::string address_;
  int fd_ = -1;
};

// Whether the host part of "HOST:PORT" is a wildcard (0.0.0.0, [::], empty):
// other daemons cannot reach such an address, so it needs --advertise.
bool IsWildcardAddress(std::string_view address);

// Writes `address` to `path` (replacing it atomically), or removes `path`
// when `address` is empty: tools and tests read the daemon's real address
// there.
Status WriteListenAddressFile(const std::string& path, std::string_view address);

}  // namespace tocl::daemon::cluster
