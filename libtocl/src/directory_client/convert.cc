#include "directory_client/convert.h"

#include <algorithm>

namespace tocl::client {
namespace pb = ::tocl::directory::v1;
namespace {

std::chrono::system_clock::time_point FromMicros(int64_t us) {
  return std::chrono::system_clock::time_point(std::chrono::microseconds(us));
}

EntityKind KindFromProto(pb::EntityKind kind) {
  switch (kind) {
    case pb::HOST:
      return EntityKind::kHost;
    case pb::PROCESS:
      return EntityKind::kProcess;
    default:
      return EntityKind::kThread;
  }
}

EntityState StateFromProto(pb::EntityState state) {
  switch (state) {
    case pb::EXITED:
      return EntityState::kExited;
    case pb::UNREACHABLE:
      return EntityState::kUnreachable;
    default:
      return EntityState::kRunning;
  }
}

}  // namespace

Entity FromProto(const pb::Entity& in) {
  Entity out;
  out.gid = Gid::FromRaw(in.gid());
  out.kind = KindFromProto(in.kind());
  out.name = in.name();
  out.state = StateFromProto(in.state());
  out.os_pid = in.os_pid();
  for (const pb::Attribute& attribute : in.attributes()) {
    out.attributes.emplace(attribute.key(), attribute.value());
  }
  for (const pb::Endpoint& endpoint : in.endpoints()) {
    out.endpoints.push_back(Endpoint{endpoint.subsystem(), endpoint.address()});
  }
  out.started_at = FromMicros(in.started_at_us());
  out.exited_at = FromMicros(in.exited_at_us());
  out.exit_reason = in.exit_reason();
  if (in.has_exit_status()) out.exit_status = in.exit_status();
  if (in.has_exit_signal()) out.exit_signal = in.exit_signal();
  out.parent = Gid::FromRaw(in.parent());
  out.address = in.address();
  out.removed = in.removed();
  return out;
}

ChangeEvent FromProto(const pb::ChangeEvent& in) {
  ChangeEvent out;
  out.seq = in.seq();
  switch (in.op()) {
    case pb::CHANGE_OP_UPDATED:
      out.op = ChangeOp::kUpdated;
      break;
    case pb::CHANGE_OP_EXITED:
      out.op = ChangeOp::kExited;
      break;
    case pb::CHANGE_OP_UNREACHABLE:
      out.op = ChangeOp::kUnreachable;
      break;
    case pb::CHANGE_OP_REACHABLE:
      out.op = ChangeOp::kReachable;
      break;
    case pb::CHANGE_OP_REMOVED:
      out.op = ChangeOp::kRemoved;
      break;
    default:
      out.op = ChangeOp::kAdded;
      break;
  }
  out.gid = Gid::FromRaw(in.gid());
  out.at = FromMicros(in.at_us());
  out.entity = FromProto(in.entity());
  return out;
}

void ToProto(const Attributes& attributes, google::protobuf::RepeatedPtrField<pb::Attribute>* out) {
  for (const auto& [key, value] : attributes) {
    pb::Attribute* attribute = out->Add();
    attribute->set_key(key);
    attribute->set_value(value);
  }
}

ProcessPoolStats FromProto(const pb::ProcessPoolStats& in) {
  ProcessPoolStats out;
  out.process = Gid::FromRaw(in.process());
  out.reported_at = FromMicros(in.reported_at_us());
  out.classes.reserve(static_cast<size_t>(in.classes_size()));
  for (const pb::PoolClassStats& stats : in.classes()) {
    out.classes.push_back(PoolClassStats{
        .network = stats.network(),
        .class_bytes = stats.class_bytes(),
        .in_use = stats.in_use(),
        .free = stats.free(),
        .provided = stats.provided(),
        .grown = stats.grown(),
        .bytes_registered = stats.bytes_registered(),
    });
  }
  return out;
}

void ToProto(const PoolClassStats& in, pb::PoolClassStats* out) {
  out->set_network(in.network);
  out->set_class_bytes(in.class_bytes);
  out->set_in_use(in.in_use);
  out->set_free(in.free);
  out->set_provided(in.provided);
  out->set_grown(in.grown);
  out->set_bytes_registered(in.bytes_registered);
}

ProcessNetworkStats FromProto(const pb::ProcessNetworkStats& in) {
  ProcessNetworkStats out;
  out.process = Gid::FromRaw(in.process());
  out.reported_at = FromMicros(in.reported_at_us());
  out.networks.reserve(static_cast<size_t>(in.networks_size()));
  for (const pb::NetworkStats& network : in.networks()) {
    NetworkStats& stats = out.networks.emplace_back();
    stats.name = network.name();
    stats.kind = network.kind();
    stats.device = network.device();
    stats.address = network.address();
    stats.frames_sent = network.frames_sent();
    stats.bytes_sent = network.bytes_sent();
    stats.frames_received = network.frames_received();
    stats.bytes_received = network.bytes_received();
    stats.failures = network.failures();
    stats.peers.reserve(static_cast<size_t>(network.peers_size()));
    for (const pb::NetworkPeerStats& peer : network.peers()) {
      stats.peers.push_back(NetworkPeerStats{
          .peer = Gid::FromRaw(peer.peer()),
          .bandwidth = peer.bandwidth(),
          .fragments_sent = peer.fragments_sent(),
          .fragments_resent = peer.fragments_resent(),
          .failed = peer.failed(),
      });
    }
    stats.provider = network.provider();
    stats.vi_cap = network.vi_cap();
    stats.vis_opened = network.vis_opened();
    stats.vis_closed = network.vis_closed();
    stats.vis.reserve(static_cast<size_t>(network.vis_size()));
    for (const pb::ViStats& vi : network.vis()) {
      stats.vis.push_back(ViStats{
          .peer = Gid::FromRaw(vi.peer()),
          .class_bytes = vi.class_bytes(),
          .state = vi.state(),
          .posted = vi.posted(),
          .credits = vi.credits(),
          .queued = vi.queued(),
          .sent = vi.sent(),
          .received = vi.received(),
      });
    }
  }
  return out;
}

void ToProto(const NetworkStats& in, size_t max_peers, size_t max_vis, pb::NetworkStats* out) {
  out->set_name(in.name);
  out->set_kind(in.kind);
  out->set_device(in.device);
  out->set_address(in.address);
  out->set_frames_sent(in.frames_sent);
  out->set_bytes_sent(in.bytes_sent);
  out->set_frames_received(in.frames_received);
  out->set_bytes_received(in.bytes_received);
  out->set_failures(in.failures);
  const size_t peers = std::min(in.peers.size(), max_peers);
  out->mutable_peers()->Reserve(static_cast<int>(peers));
  for (size_t i = 0; i < peers; ++i) {
    const NetworkPeerStats& peer = in.peers[i];
    pb::NetworkPeerStats* stats = out->add_peers();
    stats->set_peer(peer.peer.raw());
    stats->set_bandwidth(peer.bandwidth);
    stats->set_fragments_sent(peer.fragments_sent);
    stats->set_fragments_resent(peer.fragments_resent);
    stats->set_failed(peer.failed);
  }
  out->set_provider(in.provider);
  out->set_vi_cap(in.vi_cap);
  out->set_vis_opened(in.vis_opened);
  out->set_vis_closed(in.vis_closed);
  const size_t vis = std::min(in.vis.size(), max_vis);
  out->mutable_vis()->Reserve(static_cast<int>(vis));
  for (size_t i = 0; i < vis; ++i) {
    const ViStats& vi = in.vis[i];
    pb::ViStats* stats = out->add_vis();
    stats->set_peer(vi.peer.raw());
    stats->set_class_bytes(vi.class_bytes);
    stats->set_state(vi.state);
    stats->set_posted(vi.posted);
    stats->set_credits(vi.credits);
    stats->set_queued(vi.queued);
    stats->set_sent(vi.sent);
    stats->set_received(vi.received);
  }
}

tocl::directory::v1::ChangeOp ToProto(ChangeOp op) {
  namespace pb = tocl::directory::v1;
  switch (op) {
    case ChangeOp::kAdded:
      return pb::CHANGE_OP_ADDED;
    case ChangeOp::kUpdated:
      return pb::CHANGE_OP_UPDATED;
    case ChangeOp::kExited:
      return pb::CHANGE_OP_EXITED;
    case ChangeOp::kUnreachable:
      return pb::CHANGE_OP_UNREACHABLE;
    case ChangeOp::kReachable:
      return pb::CHANGE_OP_REACHABLE;
    case ChangeOp::kRemoved:
      return pb::CHANGE_OP_REMOVED;
  }
  return pb::CHANGE_OP_UNSPECIFIED;
}

}  // namespace tocl::client
