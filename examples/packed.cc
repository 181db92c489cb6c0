// Packed messages (Madeleine's pack/unpack, Fast Messages' pieces): a
// camera packs a small header (the image's size and kind) and its pixels,
// 1 MiB, by reference from its own memory; the viewer's header handler
// reads the header and says where the pixels go (memory of its own), and
// they land there with no copy. A second image is read with RecvPacked and
// a PackedReader, and one bad unpack shows the error it gets.
//
//   ./packed    # "placed 1048576 bytes in place (0 copied): 1024 x 1024 gray, checksum ok"
//
// The camera and the viewer are two runtimes (two tocl processes) in one
// program, as they would be in two programs (within one runtime a long
// range is copied once, through library memory). Both enroll with the
// local toclsd ($TOCL_DAEMON, else /var/lib/tocl/toclsd.sock).
#include <tocl/packed_message.h>
#include <tocl/runtime.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

namespace {

constexpr tocl::Tag kImage = 1;
enum class Kind : uint8_t { kGray = 1, kColor = 3 };

int Fail(const char* what, const tocl::Status& status) {
  std::fprintf(stderr, "packed: %s: %s\n", what, status.ToString().c_str());
  return 1;
}

uint64_t Checksum(std::span<const std::byte> bytes) {
  uint64_t sum = 0;
  for (std::byte b : bytes) sum = sum * 31 + static_cast<uint8_t>(b);
  return sum;
}

// One image: its header (width, height, kind), then its pixels by
// reference (PackBytes returns once the receiver holds them).
tocl::Status SendImage(tocl::Runtime& rt, tocl::Gid from, tocl::Gid to, uint32_t width,
                       uint32_t height, std::span<const std::byte> pixels) {
  TOCL_ASSIGN_OR_RETURN(tocl::PackedWriter out, rt.BeginPacked(from, to, kImage));
  TOCL_RETURN_IF_ERROR(out.Pack(width));
  TOCL_RETURN_IF_ERROR(out.Pack(height));
  TOCL_RETURN_IF_ERROR(out.Pack(Kind::kGray));
  TOCL_RETURN_IF_ERROR(out.PackBytes(pixels));
  return out.End();
}

}  // namespace

int main() {
  auto viewer_runtime = tocl::Runtime::Start({.name = "packed-viewer"});
  if (!viewer_runtime.ok()) return Fail("start", viewer_runtime.status());
  auto camera_runtime = tocl::Runtime::Start({.name = "packed-camera"});
  if (!camera_runtime.ok()) return Fail("start", camera_runtime.status());
  tocl::Runtime& rt = **viewer_runtime;
  tocl::Runtime& camera_rt = **camera_runtime;

  // The receiver's header handler: the header says how big the image is;
  // the pixels go into `frame`, sized for it.
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::byte> frame;
  std::string report;
  auto handler = rt.RegisterPackedHandler(
      tocl::Gid(), tocl::Gid(), kImage,
      [&](tocl::PackedReader& header) -> tocl::Result<tocl::PackedPlacement> {
        TOCL_ASSIGN_OR_RETURN(uint32_t width, header.Unpack<uint32_t>());
        TOCL_ASSIGN_OR_RETURN(uint32_t height, header.Unpack<uint32_t>());
        TOCL_ASSIGN_OR_RETURN(Kind kind, header.Unpack<Kind>());
        const size_t bytes = size_t{width} * height * static_cast<size_t>(kind);
        std::lock_guard lock(mu);
        frame.resize(bytes);
        report = std::to_string(width) + " x " + std::to_string(height) +
                 (kind == Kind::kGray ? " gray" : " color");
        return tocl::PackedPlacement{{frame}};
      },
      [&](const tocl::PackedCompletion& done) {
        std::lock_guard lock(mu);
        char line[256];
        if (done.status.ok()) {
          std::snprintf(line, sizeof line, "placed %llu bytes in place (%llu copied): %s",
                        static_cast<unsigned long long>(done.bytes_in_place),
                        static_cast<unsigned long long>(done.bytes_copied), report.c_str());
        } else {
          std::snprintf(line, sizeof line, "failed: %s", done.status.ToString().c_str());
        }
        report = line;
        cv.notify_all();
      },
      {.thread_name = "images"});
  if (!handler.ok()) return Fail("register the header handler", handler.status());

  tocl::Result<tocl::Gid> me = camera_rt.EnrollThread("camera");
  if (!me.ok()) return Fail("enroll", me.status());
  std::vector<std::byte> pixels(size_t{1024} * 1024);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::byte>(i * 7 + (i >> 10));
  tocl::Status sent = SendImage(camera_rt, *me, handler->thread, 1024, 1024, pixels);
  if (!sent.ok()) return Fail("send an image", sent);
  {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, std::chrono::seconds(30), [&] {
          return report.starts_with("placed") || report.starts_with("failed");
        })) {
      return Fail("wait for the image", tocl::Status(tocl::StatusCode::kDeadlineExceeded, report));
    }
    std::printf("%s, checksum %s\n", report.c_str(),
                Checksum(frame) == Checksum(pixels) ? "ok" : "WRONG");
  }
  tocl::Status cancelled = rt.CancelHandler(handler->id);
  if (!cancelled.ok()) return Fail("cancel the handler", cancelled);

  // Without a handler: Recv the header, read the pieces in order. The
  // sender waits in PackBytes until the reader takes the pixels, so it runs
  // on a thread of its own here.
  tocl::Result<tocl::Gid> viewer = rt.EnrollThread("viewer");
  if (!viewer.ok()) return Fail("enroll", viewer.status());
  std::thread camera([&] { sent = SendImage(camera_rt, *me, *viewer, 512, 2048, pixels); });
  tocl::Result<tocl::PackedReader> in = rt.RecvPacked(*viewer, *me, kImage);
  if (!in.ok()) return Fail("receive an image", in.status());
  tocl::Result<uint64_t> wrong = in->Unpack<uint64_t>();  // it is a u32
  std::printf("unpacking a u64: %s\n", wrong.status().ToString().c_str());
  const uint32_t width = *in->Unpack<uint32_t>();
  const uint32_t height = *in->Unpack<uint32_t>();
  (void)in->Unpack<Kind>();
  std::vector<std::byte> picture(size_t{width} * height);
  tocl::Result<size_t> got = in->UnpackBytes(picture);
  camera.join();
  if (!got.ok()) return Fail("unpack the pixels", got.status());
  if (!sent.ok()) return Fail("send the second image", sent);
  std::printf("read %u x %u, %zu bytes, checksum %s\n", width, height, *got,
              Checksum(picture) == Checksum(pixels) ? "ok" : "WRONG");
  return 0;
}
