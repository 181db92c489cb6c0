// tocl-identity-probe: one directory call through the raw gRPC stub, made
// by a process the identity tests control (a user of their choice, a pid
// of its own), with what the request claims chosen freely.
//
//   tocl-identity-probe [--as UID:GID] --daemon ADDR enroll [--os-pid N] [--hold]
//   tocl-identity-probe [--as UID:GID] --daemon ADDR kill GID [--signal N]
//   tocl-identity-probe [--as UID:GID] --daemon ADDR log GID [--stderr]
//   tocl-identity-probe [--as UID:GID] --daemon ADDR spawn PROGRAM
//   tocl-identity-probe [--as UID:GID] --daemon ADDR ping
//
// --as: become that uid and gid (no other groups) before anything else
// (the probe must start as root for it).
// enroll claims --os-pid (default: its own pid) and prints `gid h1.p5`;
// with --hold it then keeps the stream open until stdin closes or a signal
// ends it. Every call prints `ok` or `refused CODE: message`.
// Exit code 0 when the call succeeded, 1 when the daemon refused it, 2 on
// usage errors, 3 when the user switch failed.
#include <fmt/format.h>
#include <grp.h>
#include <grpcpp/grpcpp.h>
#include <sys/types.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <string>

#include "tocl/directory/v1/directory.grpc.pb.h"
#include "tocl/gid.h"

namespace {

namespace pb = ::tocl::directory::v1;
using std::chrono::seconds;

int Report(const grpc::Status& status) {
  if (status.ok()) {
    fmt::print("ok\n");
    std::fflush(stdout);
    return 0;
  }
  fmt::print("refused {}: {}\n", static_cast<int>(status.error_code()), status.error_message());
  std::fflush(stdout);
  return 1;
}

void SetDeadline(grpc::ClientContext& context, seconds timeout) {
  context.set_deadline(std::chrono::system_clock::now() + timeout);
}

int Enroll(pb::Directory::Stub& stub, int64_t os_pid, bool hold) {
  grpc::ClientContext context;
  auto stream = stub.EnrollProcess(&context);
  pb::EnrollRequest request;
  request.mutable_register_()->set_name("identity-probe");
  request.mutable_register_()->set_os_pid(os_pid != 0 ? os_pid : ::getpid());
  pb::EnrollResponse response;
  if (!stream->Write(request) || !stream->Read(&response)) {
    stream->WritesDone();
    return Report(stream->Finish());
  }
  fmt::print("gid {}\n", tocl::Gid::FromRaw(response.enrolled().gid()).ToString());
  std::fflush(stdout);
  if (hold) {
    char byte = 0;
    while (::read(STDIN_FILENO, &byte, 1) > 0) {
    }
  }
  request.mutable_goodbye()->set_reason("probe done");
  stream->Write(request);
  stream->WritesDone();
  return Report(stream->Finish());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tocl-identity-probe: one directory call as a chosen user"};
  std::string as;
  std::string daemon;
  app.add_option("--as", as, "UID:GID to become first");
  app.add_option("--daemon", daemon, "the daemon's address")->required();
  app.require_subcommand(1);
  int64_t os_pid = 0;
  bool hold = false;
  CLI::App* enroll = app.add_subcommand("enroll", "enroll, claiming --os-pid");
  enroll->add_option("--os-pid", os_pid, "the pid to claim (default: its own)");
  enroll->add_flag("--hold", hold, "keep the stream open until stdin closes");
  std::string target;
  int signal = 0;
  CLI::App* kill = app.add_subcommand("kill", "Kill GID");
  kill->add_option("gid", target)->required();
  kill->add_option("--signal", signal, "the signal (0: SIGTERM)");
  bool stderr_log = false;
  CLI::App* log = app.add_subcommand("log", "ReadLog GID (stdout)");
  log->add_option("gid", target)->required();
  log->add_flag("--stderr", stderr_log, "read its stderr log instead");
  std::string program;
  CLI::App* spawn = app.add_subcommand("spawn", "SpawnProcess PROGRAM");
  spawn->add_option("program", program)->required();
  CLI::App* ping = app.add_subcommand("ping", "Ping");
  CLI11_PARSE(app, argc, argv);

  if (!as.empty()) {
    unsigned uid = 0, gid = 0;
    if (std::sscanf(as.c_str(), "%u:%u", &uid, &gid) != 2) {
      fmt::print(stderr, "tocl-identity-probe: --as {} is not UID:GID\n", as);
      return 2;
    }
    if (::setgroups(0, nullptr) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0) {
      std::perror("tocl-identity-probe: switching users");
      return 3;
    }
  }
  auto stub =
      pb::Directory::NewStub(grpc::CreateChannel(daemon, grpc::InsecureChannelCredentials()));
  tocl::Gid gid;
  if (!target.empty()) {
    auto parsed = tocl::Gid::Parse(target);
    if (!parsed.ok()) {
      fmt::print(stderr, "tocl-identity-probe: {}\n", parsed.status().ToString());
      return 2;
    }
    gid = *parsed;
  }
  if (*enroll) return Enroll(*stub, os_pid, hold);
  grpc::ClientContext context;
  SetDeadline(context, seconds(20));
  if (*kill) {
    pb::KillRequest request;
    request.set_gid(gid.raw());
    request.set_signal(signal);
    pb::KillResponse response;
    return Report(stub->Kill(&context, request, &response));
  }
  if (*log) {
    pb::ReadLogRequest request;
    request.set_process(gid.raw());
    request.set_stream(stderr_log ? pb::LOG_STREAM_STDERR : pb::LOG_STREAM_STDOUT);
    pb::ReadLogResponse response;
    return Report(stub->ReadLog(&context, request, &response));
  }
  if (*spawn) {
    pb::SpawnProcessRequest request;
    request.set_executable(program);
    request.add_args("--then");
    request.add_args("wait");
    pb::SpawnProcessResponse response;
    const grpc::Status status = stub->SpawnProcess(&context, request, &response);
    if (status.ok()) fmt::print("gid {}\n", tocl::Gid::FromRaw(response.gid()).ToString());
    return Report(status);
  }
  if (*ping) {
    pb::PingResponse response;
    return Report(stub->Ping(&context, pb::PingRequest(), &response));
  }
  return 2;
}
