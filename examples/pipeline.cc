// A pipeline of three processes whose stages find each other by attribute
// query, not by id: source -> square -> sink.
//
//   ./pipeline sink &  ./pipeline square &  ./pipeline source 10
//   sink: the sum of the squares of 1..10 is 385
//
// Each stage enrolls a thread with the attributes pipeline=NAME and
// stage=STAGE; a stage that sends asks the directory for the running
// thread of the next stage. Start them in any order: a stage waits (up to
// 10 s) for the next one to appear. Several pipelines share a cluster by
// name: ./pipeline sink --name other.
#include <tocl/runtime.h>
#include <tocl/version.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr tocl::Tag kNumber = 1;  // one int64_t
constexpr tocl::Tag kEnd = 2;     // no more numbers

int Fail(std::string_view stage, const tocl::Status& status) {
  std::fprintf(stderr, "pipeline %.*s: %s\n", static_cast<int>(stage.size()), stage.data(),
               status.ToString().c_str());
  return 1;
}

// The thread of `stage` in pipeline `name`, found by its attributes.
// Threads reach the directory in the background (EnrollThread returns at
// once): WaitForQuery sleeps on the directory's changes until one is there,
// or `timeout` has passed (DeadlineExceeded).
tocl::Result<tocl::Gid> FindStage(tocl::Runtime& runtime, const std::string& name,
                                  const std::string& stage, std::chrono::milliseconds timeout) {
  const std::string query =
      "kind=thread and state=running and pipeline=" + name + " and stage=" + stage;
  TOCL_ASSIGN_OR_RETURN(std::vector<tocl::Entity> found, runtime.WaitForQuery(query, 1, timeout));
  return found.front().gid;
}

tocl::Status SendNumber(tocl::Runtime& runtime, tocl::Gid from, tocl::Gid to, int64_t value) {
  return runtime.Send(from, to, kNumber, std::as_bytes(std::span(&value, 1)));
}

int64_t ReadNumber(const tocl::Buffer& message) {
  int64_t value = 0;
  std::memcpy(&value, message.data(), sizeof(value));
  return value;
}

// source: the numbers 1..count, then the end.
tocl::Status Source(tocl::Runtime& runtime, tocl::Gid me, tocl::Gid next, int64_t count) {
  for (int64_t i = 1; i <= count; ++i) {
    TOCL_RETURN_IF_ERROR(SendNumber(runtime, me, next, i));
  }
  return runtime.Send(me, next, kEnd, std::span<const std::byte>());
}

// square: each number squared, until the end, which it passes on.
tocl::Status Square(tocl::Runtime& runtime, tocl::Gid me, tocl::Gid next) {
  for (;;) {
    TOCL_ASSIGN_OR_RETURN(tocl::Buffer message, runtime.Recv(me));  // from any thread
    if (message.tag() == kEnd) return runtime.Send(me, next, kEnd, std::span<const std::byte>());
    const int64_t value = ReadNumber(message);
    TOCL_RETURN_IF_ERROR(SendNumber(runtime, me, next, value * value));
  }
}

// sink: adds up what arrives until the end.
tocl::Status Sink(tocl::Runtime& runtime, tocl::Gid me) {
  int64_t sum = 0, count = 0;
  for (;;) {
    TOCL_ASSIGN_OR_RETURN(tocl::Buffer message, runtime.Recv(me));
    if (message.tag() == kEnd) break;
    sum += ReadNumber(message);
    ++count;
  }
  std::printf("sink: the sum of the squares of 1..%lld is %lld\n", static_cast<long long>(count),
              static_cast<long long>(sum));
  return tocl::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string stage = argc > 1 ? argv[1] : "";
  if (stage == "--version") {
    std::printf("pipeline (tocl %s)\n", TOCL_VERSION_STRING);
    return 0;
  }
  if (stage != "source" && stage != "square" && stage != "sink") {
    std::fprintf(stderr, "usage: pipeline source [COUNT] | square | sink  [--name NAME]\n");
    return 2;
  }
  int64_t count = 10;
  std::string name = "demo";
  for (int i = 2; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--name" && i + 1 < argc) {
      name = argv[++i];
    } else {
      count = std::atoll(argv[i]);
    }
  }

  auto runtime = tocl::Runtime::Start({.name = "pipeline-" + stage});
  if (!runtime.ok()) return Fail(stage, runtime.status());
  tocl::Runtime& rt = **runtime;
  // The attributes the other stages look this one up by.
  auto me = rt.EnrollThread(stage, {{"pipeline", name}, {"stage", stage}});
  if (!me.ok()) return Fail(stage, me.status());

  // The stages that send look up the next one.
  tocl::Gid next;
  if (stage != "sink") {
    auto found =
        FindStage(rt, name, stage == "source" ? "square" : "sink", std::chrono::seconds(10));
    if (!found.ok()) return Fail(stage, found.status());
    next = *found;
  }

  tocl::Status done = stage == "source"   ? Source(rt, *me, next, count)
                      : stage == "square" ? Square(rt, *me, next)
                                          : Sink(rt, *me);
  if (!done.ok()) return Fail(stage, done);
  // Returns once what was sent has left (or 5 s have passed).
  tocl::Status shutdown = rt.Shutdown();
  return shutdown.ok() ? 0 : Fail(stage, shutdown);
}
