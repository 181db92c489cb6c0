#include "tocl_peer.h"

#include <fmt/format.h>

#include <barrier>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <span>
#include <thread>
#include <utility>

#include "payload_buffer.h"
#include "timing.h"
#include "tocl/runtime.h"

namespace tocl::bench::msg {
namespace {

constexpr Tag kTagData = 1;
constexpr Tag kTagStop = 2;      // ends a ping-pong
constexpr Tag kTagAck = 3;       // a stream receiver's answer to kSync and kLast
constexpr Tag kTagIdleStop = 4;  // ends an idle thread's Recv
// 64 KiB payloads plus the header need the next size class up.
constexpr size_t kShortMax = size_t{128} << 10;
// The packed case's header: this many u64 values.
constexpr size_t kPackedHeaderValues = 16;
constexpr size_t kPackedHeaderBytes = kPackedHeaderValues * sizeof(uint64_t);
// An idle thread wakes this rarely even when nobody stops it.
constexpr auto kIdleRecvTimeout = std::chrono::seconds(120);

std::span<const std::byte> Bytes(const PayloadBuffer& buffer, size_t size) {
  return {buffer.data(), size};
}

class RuntimePeer final : public ToclPeer {
 public:
  explicit RuntimePeer(std::unique_ptr<Runtime> runtime) : runtime_(std::move(runtime)) {}

  ~RuntimePeer() override {
    if (!idle_.empty()) (void)StopIdleThreads();
    (void)Shutdown();
  }

  Result<std::vector<uint64_t>> Enroll(size_t count) override {
    while (threads_.size() < count) {
      std::string name = threads_.empty() ? "main" : fmt::format("sender-{}", threads_.size());
      TOCL_ASSIGN_OR_RETURN(Gid gid, runtime_->EnrollThread(std::move(name)));
      threads_.push_back(gid);
    }
    std::vector<uint64_t> raw;
    for (Gid gid : threads_) raw.push_back(gid.raw());
    return raw;
  }

  void SetPeerThreads(std::vector<uint64_t> gids) override {
    peer_threads_.clear();
    for (uint64_t raw : gids) peer_threads_.push_back(Gid::FromRaw(raw));
  }

  Status StartIdleThreads(size_t count) override {
    for (size_t i = 0; i < count; ++i) {
      TOCL_ASSIGN_OR_RETURN(Gid gid, runtime_->EnrollThread(fmt::format("idle-{}", i)));
      Idle& idle = idle_.emplace_back();
      idle.gid = gid;
      idle.thread = std::thread([this, gid] {
        // Whatever ends the wait (the stop message, the timeout, shutdown),
        // the thread is done.
        (void)runtime_->RecvFor(gid, kIdleRecvTimeout);
      });
    }
    return Status::Ok();
  }

  Status StopIdleThreads() override {
    Status first;
    PayloadBuffer stop(8);
    StoreStamp(stop.data(), kStopStamp);
    for (Idle& idle : idle_) {
      Status sent = runtime_->Send(threads_.front(), idle.gid, kTagIdleStop, Bytes(stop, 8));
      if (!sent.ok() && first.ok()) first = sent.WithContext("stop an idle thread");
    }
    for (Idle& idle : idle_) {
      idle.thread.join();
      Status left = runtime_->LeaveThread(idle.gid);
      if (!left.ok() && first.ok()) first = left.WithContext("LeaveThread");
    }
    idle_.clear();
    return first;
  }

  Status PingPong(Role role, const RunSpec& spec, LatencyResult* out, Way way) override {
    const bool irecv = way == Way::kIrecv;
    TOCL_RETURN_IF_ERROR(CheckPairs(1));
    const Gid me = threads_[0];
    const Gid peer = peer_threads_[0];
    const size_t size = spec.size;
    Runtime& runtime = *runtime_;
    PayloadBuffer buffer(size);
    if (role == Role::kInitiator) {
      PayloadBuffer reply(size);
      Status failure;
      // The MPI way: the receive is posted before the send, waited for after.
      auto receive = [&](auto&& send) -> Result<Buffer> {
        if (!irecv) {
          TOCL_RETURN_IF_ERROR(send());
          return runtime.Recv(me, peer, kTagData);
        }
        TOCL_ASSIGN_OR_RETURN(Request request, runtime.Irecv(me, peer, kTagData));
        TOCL_RETURN_IF_ERROR(send());
        TOCL_RETURN_IF_ERROR(request.Wait());
        return request.TakeBuffer();
      };
      auto round_trip = [&](uint64_t i) {
        StoreStamp(buffer.data(), i);
        Result<Buffer> got = receive([&] {
          return runtime.Send(me, peer, kTagData, Bytes(buffer, size)).WithContext("Send");
        });
        if (!got.ok()) {
          failure = got.status().WithContext("Recv");
          return false;
        }
        if (got->size() != size) {
          failure = DataLoss(fmt::format("a reply of {} bytes, expected {}", got->size(), size));
          return false;
        }
        std::memcpy(reply.data(), got->data(), size);
        if (LoadStamp(reply.data()) != i) {
          failure = DataLoss("a reply carried the wrong round");
          return false;
        }
        return true;
      };
      uint64_t next = 1;
      bool ok = TimeRoundTrips(round_trip, spec, next, *out);
      StoreStamp(buffer.data(), kStopStamp);
      Status stopped = runtime.Send(me, peer, kTagStop, Bytes(buffer, size));
      if (!ok) return failure.WithContext("tocl ping-pong");
      return stopped.WithContext("tocl ping-pong: stop");
    }
    if (way == Way::kHandler) return HandlerResponder(me, peer, size);
    for (;;) {
      Result<Buffer> got = runtime.Recv(me, peer, kAnyTag);
      if (!got.ok()) return got.status().WithContext("tocl ping-pong: Recv");
      if (got->tag() == kTagStop) return Status::Ok();
      if (got->size() != size) {
        return DataLoss(fmt::format("tocl ping-pong: {} bytes, expected {}", got->size(), size));
      }
      std::memcpy(buffer.data(), got->data(), size);
      TOCL_RETURN_IF_ERROR(
          runtime.Send(me, peer, kTagData, Bytes(buffer, size)).WithContext("tocl ping-pong"));
    }
  }

  Status PackedPingPong(Role role, const RunSpec& spec, LatencyResult* out,
                        Packing packing) override {
    const bool packed = packing == Packing::kPacked;
    TOCL_RETURN_IF_ERROR(CheckPairs(1));
    const Gid me = threads_[0];
    const Gid peer = peer_threads_[0];
    const size_t size = spec.size;
    Runtime& runtime = *runtime_;
    if (role != Role::kInitiator) return PackedResponder(me, peer, size, packing);
    // The pre-packed buffer: the header's values, then the body, as an
    // application would lay them out for one Send.
    PayloadBuffer prepacked(kPackedHeaderBytes + size);
    std::span<const std::byte> body(prepacked.data() + kPackedHeaderBytes, size);
    Status failure;
    auto round_trip = [&](uint64_t i) {
      uint64_t header[kPackedHeaderValues];
      for (size_t v = 0; v < kPackedHeaderValues; ++v) header[v] = i + v;
      Status sent;
      if (packed) {
        sent = [&]() -> Status {
          TOCL_ASSIGN_OR_RETURN(PackedWriter writer, runtime.BeginPacked(me, peer, kTagData));
          for (uint64_t value : header) TOCL_RETURN_IF_ERROR(writer.Pack(value));
          TOCL_RETURN_IF_ERROR(writer.PackBytes(body));
          return writer.End();
        }();
      } else {
        std::memcpy(prepacked.data(), header, kPackedHeaderBytes);
        sent = runtime.Send(me, peer, kTagData, Bytes(prepacked, kPackedHeaderBytes + size));
      }
      if (!sent.ok()) {
        failure = sent.WithContext("send");
        return false;
      }
      Result<Buffer> got = runtime.Recv(me, peer, kTagData);
      if (!got.ok() || got->size() != 8 || LoadStamp(got->data()) != i) {
        failure = got.ok() ? DataLoss("a wrong answer") : got.status().WithContext("Recv");
        return false;
      }
      return true;
    };
    uint64_t next = 1;
    bool ok = TimeRoundTrips(round_trip, spec, next, *out);
    PayloadBuffer stop(8);
    StoreStamp(stop.data(), kStopStamp);
    Status stopped = runtime.Send(me, peer, kTagStop, Bytes(stop, 8));
    if (!ok) return failure.WithContext("tocl packed ping-pong");
    return stopped.WithContext("tocl packed ping-pong: stop");
  }

  Status Stream(Role role, const RunSpec& spec, StreamResult* out) override {
    TOCL_RETURN_IF_ERROR(CheckPairs(spec.pairs));
    std::vector<Status> results(spec.pairs);
    std::vector<StreamResult> streams(spec.pairs);
    std::barrier<> barrier(spec.pairs);
    auto one = [&](uint32_t pair) {
      results[pair] =
          role == Role::kInitiator
              ? StreamSend(pair, spec, spec.pairs > 1 ? &barrier : nullptr, streams[pair])
              : StreamReceive(pair, spec);
    };
    if (spec.pairs == 1) {
      one(0);
    } else {
      std::vector<std::thread> threads;
      for (uint32_t pair = 0; pair < spec.pairs; ++pair) threads.emplace_back(one, pair);
      for (std::thread& thread : threads) thread.join();
    }
    for (const Status& result : results) TOCL_RETURN_IF_ERROR(result);
    if (out != nullptr) *out = CombineStreams(streams);
    return Status::Ok();
  }

  Status Shutdown() override {
    if (!runtime_) return Status::Ok();
    return runtime_->Shutdown();
  }

 private:
  struct Idle {
    Gid gid;
    std::thread thread;
  };

  // How a handler-based responder ends: the stop message, or the first
  // failure, from a handler call; the responder's thread waits for it.
  class Stop {
   public:
    void Fail(Status status) {
      std::lock_guard lock(mu_);
      if (failure_.ok()) failure_ = std::move(status);
      stopped_ = true;
      stopped_cv_.notify_all();
    }
    Status Wait() {
      std::unique_lock lock(mu_);
      stopped_cv_.wait(lock, [&] { return stopped_; });
      return failure_;
    }

   private:
    std::mutex mu_;
    std::condition_variable stopped_cv_;
    bool stopped_ = false;  // guarded by mu_
    Status failure_;        // guarded by mu_
  };

  // The responder's side as a handler on `me`: each message runs a call
  // that copies it out and sends the copy back, as the Recv loop does;
  // the stop message ends the wait here, then the handler is cancelled.
  Status HandlerResponder(Gid me, Gid peer, size_t size) {
    Runtime& runtime = *runtime_;
    PayloadBuffer buffer(size);
    Stop stop;
    auto fail = [&](Status status) { stop.Fail(std::move(status)); };
    TOCL_ASSIGN_OR_RETURN(
        HandlerRegistration handler,
        runtime.RegisterHandler(
            me, peer, kAnyTag,
            [&](HandlerContext& call) {
              if (call.info.tag == kTagStop) return fail(Status::Ok());
              if (call.message.size() != size) {
                return fail(DataLoss(fmt::format("tocl handler ping-pong: {} bytes, expected {}",
                                                 call.message.size(), size)));
              }
              std::memcpy(buffer.data(), call.message.data(), size);
              Status sent = runtime.Send(me, peer, kTagData, Bytes(buffer, size));
              if (!sent.ok()) fail(sent.WithContext("tocl handler ping-pong"));
            },
            {.ordered = true}));
    Status failure = stop.Wait();
    TOCL_RETURN_IF_ERROR(runtime.CancelHandler(handler.id));
    return failure;
  }

  // The packed case's responder: each message's header values are read
  // (the first is the round, answered in 8 B) and its body placed: by a
  // header handler in `body` (kPacked), by Recv (kPrepacked: the body stays
  // in the received buffer, library memory, and no copy out is charged to
  // it), or by RecvInto memory of the responder's (kPrepackedInto).
  Status PackedResponder(Gid me, Gid peer, size_t size, Packing packing) {
    Runtime& runtime = *runtime_;
    PayloadBuffer body(size);
    PayloadBuffer answer(8);
    auto reply = [&](uint64_t round) {
      StoreStamp(answer.data(), round);
      return runtime.Send(me, peer, kTagData, Bytes(answer, 8));
    };
    if (packing == Packing::kPrepackedInto) {
      PayloadBuffer into(kPackedHeaderBytes + size);
      for (;;) {
        Result<MessageInfo> got =
            runtime.RecvInto(me, std::span(into.data(), kPackedHeaderBytes + size), peer, kAnyTag);
        if (!got.ok()) return got.status().WithContext("tocl pre-packed: RecvInto");
        if (got->tag == kTagStop) return Status::Ok();
        if (got->size != kPackedHeaderBytes + size) {
          return DataLoss(fmt::format("tocl pre-packed: {} bytes, expected {}", got->size,
                                      kPackedHeaderBytes + size));
        }
        uint64_t header[kPackedHeaderValues];
        std::memcpy(header, into.data(), kPackedHeaderBytes);
        TOCL_RETURN_IF_ERROR(reply(header[0]).WithContext("tocl pre-packed"));
      }
    }
    if (packing == Packing::kPrepacked) {
      for (;;) {
        Result<Buffer> got = runtime.Recv(me, peer, kAnyTag);
        if (!got.ok()) return got.status().WithContext("tocl pre-packed: Recv");
        if (got->tag() == kTagStop) return Status::Ok();
        if (got->size() != kPackedHeaderBytes + size) {
          return DataLoss(fmt::format("tocl pre-packed: {} bytes, expected {}", got->size(),
                                      kPackedHeaderBytes + size));
        }
        uint64_t header[kPackedHeaderValues];
        std::memcpy(header, got->data(), kPackedHeaderBytes);
        TOCL_RETURN_IF_ERROR(reply(header[0]).WithContext("tocl pre-packed"));
      }
    }
    Stop stop;
    auto fail = [&](Status status) { stop.Fail(std::move(status)); };
    uint64_t round = 0;  // the handler's (ordered: one call at a time)
    TOCL_ASSIGN_OR_RETURN(HandlerRegistration placer,
                          runtime.RegisterPackedHandler(
                              me, peer, kTagData,
                              [&](PackedReader& header) -> Result<PackedPlacement> {
                                for (size_t v = 0; v < kPackedHeaderValues; ++v) {
                                  TOCL_ASSIGN_OR_RETURN(uint64_t value, header.Unpack<uint64_t>());
                                  if (v == 0) round = value;
                                }
                                return PackedPlacement{{std::span(body.data(), size)}};
                              },
                              [&](const PackedCompletion& done) {
                                Status status = done.status;
                                if (status.ok() && done.placed[0] != size)
                                  status = DataLoss("a short body");
                                if (status.ok()) status = reply(round);
                                if (!status.ok()) fail(status.WithContext("tocl packed"));
                              },
                              {.ordered = true}));
    TOCL_ASSIGN_OR_RETURN(
        HandlerRegistration stopper,
        runtime.RegisterHandler(me, peer, kTagStop, [&](HandlerContext&) { fail(Status::Ok()); },
                                {.ordered = true}));
    Status failure = stop.Wait();
    TOCL_RETURN_IF_ERROR(runtime.CancelHandler(placer.id));
    TOCL_RETURN_IF_ERROR(runtime.CancelHandler(stopper.id));
    return failure;
  }

  Status CheckPairs(uint32_t pairs) const {
    if (threads_.size() < pairs || peer_threads_.size() < pairs) {
      return FailedPrecondition(fmt::format("{} pairs need as many Gids on both sides ({} and {})",
                                            pairs, threads_.size(), peer_threads_.size()));
    }
    return Status::Ok();
  }

  Status StreamSend(uint32_t pair, const RunSpec& spec, std::barrier<>* barrier,
                    StreamResult& out) {
    const Gid me = threads_[pair];
    const Gid peer = peer_threads_[pair];
    Runtime& runtime = *runtime_;
    PayloadBuffer source(spec.size);
    Status failure;
    auto send = [&](StreamMark mark) {
      StoreStamp(source.data(), static_cast<uint64_t>(mark));
      Status sent = runtime.Send(me, peer, kTagData, Bytes(source, spec.size));
      if (sent.ok()) return true;
      failure = sent.WithContext("Send");
      return false;
    };
    auto wait_ack = [&] {
      Result<Buffer> ack = runtime.Recv(me, peer, kTagAck);
      if (ack.ok()) return true;
      failure = ack.status().WithContext("Recv ack");
      return false;
    };
    if (!TimeStream(send, wait_ack, spec, barrier, out)) {
      return failure.WithContext(fmt::format("tocl stream {}", pair));
    }
    return Status::Ok();
  }

  Status StreamReceive(uint32_t pair, const RunSpec& spec) {
    const Gid me = threads_[pair];
    const Gid peer = peer_threads_[pair];
    Runtime& runtime = *runtime_;
    PayloadBuffer target(spec.size);
    const bool long_messages = spec.size > runtime.short_max_payload();
    for (;;) {
      if (long_messages) {
        // Long messages land straight in our memory (no copy afterwards).
        auto got =
            runtime.RecvInto(me, std::span<std::byte>(target.data(), spec.size), peer, kTagData);
        if (!got.ok()) {
          return got.status().WithContext(fmt::format("tocl stream {}: RecvInto", pair));
        }
        if (got->size != spec.size) {
          return DataLoss(
              fmt::format("tocl stream {}: {} bytes, expected {}", pair, got->size, spec.size));
        }
      } else {
        Result<Buffer> got = runtime.Recv(me, peer, kTagData);
        if (!got.ok()) return got.status().WithContext(fmt::format("tocl stream {}: Recv", pair));
        if (got->size() != spec.size) {
          return DataLoss(
              fmt::format("tocl stream {}: {} bytes, expected {}", pair, got->size(), spec.size));
        }
        std::memcpy(target.data(), got->data(), spec.size);
      }
      auto mark = static_cast<StreamMark>(LoadStamp(target.data()));
      if (mark == StreamMark::kData) continue;
      TOCL_RETURN_IF_ERROR(runtime.Send(me, peer, kTagAck, Bytes(target, 8))
                               .WithContext(fmt::format("tocl stream {}: ack", pair)));
      if (mark == StreamMark::kLast) return Status::Ok();
    }
  }

  std::unique_ptr<Runtime> runtime_;
  std::vector<Gid> threads_;  // this process's Gids; [0] is the main thread's
  std::vector<Gid> peer_threads_;
  std::vector<Idle> idle_;
};

}  // namespace

bool ToclRuntimeBuilt() {
  return true;
}

Result<std::unique_ptr<ToclPeer>> StartToclPeer(const ToclPeerOptions& options) {
  RuntimeOptions runtime_options;
  runtime_options.daemon_address = options.daemon_address;
  runtime_options.name = options.name;
  runtime_options.attributes.emplace("role", "bench");
  runtime_options.subsystems = options.subsystems;
  if (!options.via_provider.empty()) runtime_options.via_provider = options.via_provider;
  runtime_options.short_max = kShortMax;
  if (options.spin.count() >= 0) runtime_options.spin = options.spin;
  TOCL_ASSIGN_OR_RETURN(std::unique_ptr<Runtime> runtime,
                        Runtime::Start(std::move(runtime_options)));
  auto peer = std::make_unique<RuntimePeer>(std::move(runtime));
  TOCL_RETURN_IF_ERROR(peer->Enroll(1).status());
  return std::unique_ptr<ToclPeer>(std::move(peer));
}

}  // namespace tocl::bench::msg
