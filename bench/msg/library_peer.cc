#include "library_peer.h"

namespace tocl::bench::msg {
namespace {

class Ucx final : public LibraryPeer {
 public:
  Ucx(UcxTest test, UcxTransport transport, uint32_t size)
      : test_(test), perftest_(test, transport, size) {}

  Result<LibraryFigures> Run(std::chrono::nanoseconds warmup,
                             std::chrono::nanoseconds measure) override {
    TOCL_ASSIGN_OR_RETURN(UcxPerftestFigures got, perftest_.Run(warmup, measure));
    LibraryFigures figures;
    if (test_ == UcxTest::kTagLat) {
      figures.one_way_ns = got.latency_p50_us * 1e3;
    } else {
      // Bandwidth follows from the messages: size x rate (what tag_bw's
      // own MB/s column is, in 2^20 bytes).
      figures.messages = got.iterations;
      figures.seconds = static_cast<double>(got.iterations) / got.rate_overall_per_s;
    }
    return figures;
  }

 private:
  UcxTest test_;
  UcxPerftest perftest_;
};

class Mpi final : public LibraryPeer {
 public:
  Mpi(MpiCase what, MpiBtl btl, uint32_t size) : what_(what), btl_(btl), size_(size) {}

  Result<LibraryFigures> Run(std::chrono::nanoseconds warmup,
                             std::chrono::nanoseconds measure) override {
    TOCL_ASSIGN_OR_RETURN(MpiFigures got, RunMpi(what_, btl_, size_, warmup, measure));
    return LibraryFigures{got.one_way_ns, got.messages, got.seconds};
  }

 private:
  MpiCase what_;
  MpiBtl btl_;
  uint32_t size_;
};

}  // namespace

std::unique_ptr<LibraryPeer> UcxPeer(UcxTest test, UcxTransport transport, uint32_t size) {
  return std::make_unique<Ucx>(test, transport, size);
}

std::unique_ptr<LibraryPeer> MpiPeer(MpiCase what, MpiBtl btl, uint32_t size) {
  return std::make_unique<Mpi>(what, btl, size);
}

Status LibraryPeersAvailable() {
  TOCL_RETURN_IF_ERROR(UcxPerftestAvailable());
  return MpiPeerAvailable();
}

}  // namespace tocl::bench::msg
