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

// Where a connection goes and how: a gRPC target, plaintext (unix sockets,
// or TCP without credentials) or mutual TLS with the credentials loaded
// from `credentials_dir` (TCP only).
struct ChannelTarget {
  std::string target = {};
  std::shared_ptr<grpc::ChannelCredentials> tls = nullptr;  // null: plaintext
  std::string credentials_dir = {};                         // for error messages; "" when plaintext
};

// The target for `address` (DaemonTarget: InvalidArgument when it is
// malformed) and the credentials directory the caller chose
// ("": $TOCL_CREDENTIALS). Credentials are loaded for TCP targets only, so
// a broken $TOCL_CREDENTIALS never stops a local tool; for those,
// InvalidArgument naming the file that is wrong.
Result<ChannelTarget> ResolveTarget(std::string_view address, const std::string& credentials_dir);

std::shared_ptr<grpc::Channel> MakeChannel(const ChannelTarget& target);

// A context with the default call deadline.
std::unique_ptr<grpc::ClientContext> NewCallContext();

}  // namespace tocl::client

namespace tocl {

namespace client {

// A channel and the stubs on it. Replaced as a whole, never changed.
struct Connection {
  explicit Connection(const ChannelTarget& target);
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
  explicit ConnectionSlot(ChannelTarget target)
      : target_(std::move(target)), current_(std::make_shared<Connection>(target_)) {}

  const std::string& target() const { return target_.target; }
  const ChannelTarget& channel_target() const { return target_; }
  std::shared_ptr<Connection> Get() const;
  // Replaces `failed` with a new connection unless someone already did.
  void Retire(const std::shared_ptr<Connection>& failed);
  // Retires `used` if `status` says the daemon could not be reached.
  void Observe(const std::shared_ptr<Connection>& used, const grpc::Status& status);

 private:
  const ChannelTarget target_;
  mutable std::mutex mu_;
  std::shared_ptr<Connection> current_;  // guarded by mu_
};

}  // namespace client

struct DirectoryClient::Impl {
  explicit Impl(client::ChannelTarget target) : connection(std::move(target)) {}
  client::ConnectionSlot connection;
};

}  // namespace tocl
