#include "directory_client/convert.h"

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

}  // namespace

Entity FromProto(const pb::Entity& in) {
  Entity out;
  out.gid = Gid::FromRaw(in.gid());
  out.kind = KindFromProto(in.kind());
  out.name = in.name();
  out.state = in.state() == pb::EXITED ? EntityState::kExited : EntityState::kRunning;
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

}  // namespace tocl::client
