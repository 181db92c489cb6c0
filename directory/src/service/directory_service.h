// The gRPC service tocl.directory.v1.Directory over a Store.
//
// Synchronous gRPC: each call runs on a gRPC server thread; an enroll stream
// holds one thread for the life of its process (acceptable for the hundreds
// of processes a host runs; the callback API is the upgrade path).
#pragma once

#include <atomic>
#include <string>
#include <string_view>

#include "service/session_registry.h"
#include "store/store.h"
#include "tocl/directory/v1/directory.grpc.pb.h"

namespace tocl::directory {

class DirectoryService final : public pb::Directory::Service {
 public:
  explicit DirectoryService(Store& store) : store_(store) {}

  // From now on streams that end do not mark their processes exited: the
  // daemon is stopping, and the processes re-enroll when it is back.
  void BeginShutdown();
  bool shutting_down() const { return shutting_down_.load(std::memory_order_acquire); }

  grpc::Status EnrollProcess(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<pb::EnrollResponse, pb::EnrollRequest>* stream) override;
  grpc::Status RegisterThreads(grpc::ServerContext* context,
                               const pb::RegisterThreadsRequest* request,
                               pb::WriteResponse* response) override;
  grpc::Status UnregisterThreads(grpc::ServerContext* context,
                                 const pb::UnregisterThreadsRequest* request,
                                 pb::WriteResponse* response) override;
  grpc::Status PublishEndpoint(grpc::ServerContext* context,
                               const pb::PublishEndpointRequest* request,
                               pb::WriteResponse* response) override;
  grpc::Status Lookup(grpc::ServerContext* context, const pb::LookupRequest* request,
                      pb::LookupResponse* response) override;
  grpc::Status Query(grpc::ServerContext* context, const pb::QueryRequest* request,
                     pb::QueryResponse* response) override;
  grpc::Status Watch(grpc::ServerContext* context, const pb::WatchRequest* request,
                     grpc::ServerWriter<pb::ChangeEvent>* writer) override;
  grpc::Status Ping(grpc::ServerContext* context, const pb::PingRequest* request,
                    pb::PingResponse* response) override;
  grpc::Status GetPoolStats(grpc::ServerContext* context, const pb::GetPoolStatsRequest* request,
                            pb::GetPoolStatsResponse* response) override;
  grpc::Status GetNetworkStats(grpc::ServerContext* context,
                               const pb::GetNetworkStatsRequest* request,
                               pb::GetNetworkStatsResponse* response) override;

 private:
  // Keeps a process's report unless it is over the limits (then logs why).
  void KeepPoolStats(Gid process, uint64_t generation, const pb::PoolStatsReport& report);
  void KeepNetworkStats(Gid process, uint64_t generation, const pb::NetworkStatsReport& report);
  // NotFound saying why `process` has no statistics of `what` ("pool",
  // "network").
  Status NoStats(Gid process, std::string_view what) const;

  Store& store_;
  SessionRegistry sessions_;
  std::atomic<bool> shutting_down_{false};  // release/acquire: set once, read by handlers
};

}  // namespace tocl::directory
