// Conversions between the directory's protobuf messages and tocl's public
// value types (which must not show protobuf).
#pragma once

#include "tocl/directory/v1/directory.pb.h"
#include "tocl/entity.h"
#include "tocl/network_stats.h"
#include "tocl/pool_stats.h"

namespace tocl::client {

Entity FromProto(const tocl::directory::v1::Entity& entity);
ChangeEvent FromProto(const tocl::directory::v1::ChangeEvent& event);
tocl::directory::v1::ChangeOp ToProto(ChangeOp op);
void ToProto(const Attributes& attributes,
             google::protobuf::RepeatedPtrField<tocl::directory::v1::Attribute>* out);
ProcessPoolStats FromProto(const tocl::directory::v1::ProcessPoolStats& stats);
void ToProto(const PoolClassStats& stats, tocl::directory::v1::PoolClassStats* out);
ProcessNetworkStats FromProto(const tocl::directory::v1::ProcessNetworkStats& stats);
// Copies at most `max_peers` of the network's peers and `max_vis` of its VIs
// (the first ones: the most recent).
void ToProto(const NetworkStats& stats, size_t max_peers, size_t max_vis,
             tocl::directory::v1::NetworkStats* out);

}  // namespace tocl::client
