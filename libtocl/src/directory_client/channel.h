// Internal parts shared by DirectoryClient and ProcessSession.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "grpc/health/v1/health.grpc.pb.h"
#include "tocl/directory/v1/directory.grpc.pb.h"
#include "tocl/directory_client.h"

namespace tocl::client {

namespace pb = ::tocl::directory::v1;

// How long a unary call to the daemon may take before it is abandoned.
inline constexpr auto kCallTimeout = std::chrono::seconds(10);

// "unix:/p", "unix:///p", "/p" (a socket path) or "host:port" -> gRPC target.
std::string NormalizeAddress(std::string_view address);

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target);

// A context with the default call deadline.
std::unique_ptr<grpc::ClientContext> NewCallContext();

}  // namespace tocl::client

namespace tocl {

namespace client {

// A channel and the stubs on it. Replaced as a whole, never changed.
struct Connection {
  explicit Connection(const std::string& target);
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::Directory::Stub> directory;
  std::unique_ptr<grpc::health::v1::Health::Stub> health;
};

// The current connection to one daemon. gRPC 1.51's channels can stay in
// TRANSIENT_FAILURE long after a restarted daemon listens again (its
// reconnect backoff outlives the outage), so a call that failed as
// UNAVAILABLE retires its connection and the next call opens a fresh one.
class ConnectionSlot {
 public:
  explicit ConnectionSlot(std::string target)
      : target_(std::move(target)), current_(std::make_shared<Connection>(target_)) {}

  const std::string& target() const { return target_; }
  std::shared_ptr<Connection> Get() const;
  // Replaces `failed` with a new connection unless someone already did.
  void Retire(const std::shared_ptr<Connection>& failed);
  // Retires `used` if `status` says the daemon could not be reached.
  void Observe(const std::shared_ptr<Connection>& used, const grpc::Status& status);

 private:
  const std::string target_;
  mutable std::mutex mu_;
  std::shared_ptr<Connection> current_;  // guarded by mu_
};

}  // namespace client

struct DirectoryClient::Impl {
  explicit Impl(const std::string& target) : connection(target) {}
  client::ConnectionSlot connection;
};

}  // namespace tocl
