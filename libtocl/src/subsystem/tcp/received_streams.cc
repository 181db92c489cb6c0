#include "subsystem/tcp/received_streams.h"

#include <algorithm>
#include <vector>

namespace tocl::subsystem::tcp {

ReceivedStream& ReceivedStreams::Resume(Gid peer, uint64_t id, uint64_t from,
                                        InboundConnection* connection,
                                        InboundConnection** replaced) {
  auto [it, made] = streams_.try_emplace({peer.raw(), id});
  ReceivedStream& stream = it->second;
  if (made) {
    stream.peer = peer;
    stream.id = id;
  }
  *replaced = stream.connection != connection ? stream.connection : nullptr;
  stream.connection = connection;
  if (from > stream.received) {
    stream.received = from;
    stream.unreported_bytes = 0;
  }
  // Reported now: the answer to the resume.
  stream.reported = stream.received;
  return stream;
}

void ReceivedStreams::Detach(ReceivedStream& stream, InboundConnection* connection,
                             std::chrono::steady_clock::time_point now) {
  if (stream.connection != connection) return;  // replaced already
  stream.connection = nullptr;
  stream.idle_since = now;
}

void ReceivedStreams::Expire(std::chrono::steady_clock::time_point now,
                             std::chrono::milliseconds linger) {
  std::vector<std::pair<std::chrono::steady_clock::time_point, std::pair<uint64_t, uint64_t>>> idle;
  for (auto it = streams_.begin(); it != streams_.end();) {
    if (it->second.connection == nullptr && now - it->second.idle_since >= linger) {
      it = streams_.erase(it);
      continue;
    }
    if (it->second.connection == nullptr) idle.emplace_back(it->second.idle_since, it->first);
    ++it;
  }
  if (idle.size() <= kMaxIdle) return;
  std::sort(idle.begin(), idle.end());
  for (size_t i = 0; i < idle.size() - kMaxIdle; ++i) streams_.erase(idle[i].second);
}

}  // namespace tocl::subsystem::tcp
