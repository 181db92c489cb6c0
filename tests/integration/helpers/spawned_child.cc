// tocl-spawned-child: a program the spawn tests have a daemon start.
//
//   tocl-spawned-child [--no-enroll] [--runtime] [--name NAME] [--attribute K=V]...
//                      [--say TEXT]... [--complain TEXT]...
//                      [--bytes N] [--print-env NAME]... [--print-cwd]
//                      [--then exit|crash|wait] [--status N]
//
// Enrolls with $TOCL_DAEMON (unless --no-enroll) as --name (default
// "spawned-child") with the --attribute pairs, through DirectoryClient::Enroll
// or, with --runtime, tocl::Runtime::Start (shm only; an empty --name is the
// runtime's default), and prints `gid h1.p5`;
// prints `env NAME=value` for each --print-env (`env NAME unset` when it is
// not set) and `cwd /path` for --print-cwd; writes each --say line to stdout,
// each --complain line to stderr, and N bytes of 0123456789... to stdout.
// Then:
//   exit   closes its session (goodbye) and exits with --status (default)
//   crash  exits with --status without closing its session
//   wait   sleeps until a signal ends it (SIGALRM after 60 s at the latest)
// Exit code 100 when enrolling fails (reason on stderr).
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tocl/directory_client.h"
#include "tocl/runtime.h"

namespace {

void Say(std::FILE* stream, const std::string& line) {
  fmt::print(stream, "{}\n", line);
  std::fflush(stream);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tocl-spawned-child: a program for the spawn tests"};
  bool no_enroll = false;
  bool print_cwd = false;
  std::vector<std::string> say, complain, print_env;
  size_t bytes = 0;
  std::string then = "exit";
  int status = 0;
  bool use_runtime = false;
  std::string process_name = "spawned-child";
  std::vector<std::string> attribute_pairs;
  app.add_flag("--no-enroll", no_enroll, "do not enroll");
  app.add_flag("--runtime", use_runtime, "enroll through tocl::Runtime::Start");
  app.add_option("--name", process_name, "the name to enroll with");
  app.add_option("--attribute", attribute_pairs, "KEY=VALUE to enroll with");
  app.add_option("--say", say, "a line for stdout");
  app.add_option("--complain", complain, "a line for stderr");
  app.add_option("--bytes", bytes, "bytes of 0123456789... for stdout");
  app.add_option("--print-env", print_env, "print this environment variable");
  app.add_flag("--print-cwd", print_cwd, "print the working directory");
  app.add_option("--then", then, "exit, crash or wait")
      ->check(CLI::IsMember({"exit", "crash", "wait"}));
  app.add_option("--status", status, "exit status");
  CLI11_PARSE(app, argc, argv);

  tocl::Attributes attributes;
  for (const std::string& pair : attribute_pairs) {
    const size_t equals = pair.find('=');
    if (equals == std::string::npos) {
      Say(stderr, "--attribute " + pair + ": expected KEY=VALUE");
      return 2;
    }
    attributes[pair.substr(0, equals)] = pair.substr(equals + 1);
  }
  std::unique_ptr<tocl::DirectoryClient> client;
  std::unique_ptr<tocl::ProcessSession> session;
  std::unique_ptr<tocl::Runtime> runtime;
  if (!no_enroll && use_runtime) {
    tocl::RuntimeOptions options;
    options.name = process_name;
    options.attributes = attributes;
    options.networks = "shm";
    auto started = tocl::Runtime::Start(options);
    if (!started.ok()) {
      Say(stderr, "start: " + started.status().ToString());
      return 100;
    }
    runtime = std::move(*started);
    Say(stdout, "gid " + runtime->gid().ToString());
  } else if (!no_enroll) {
    auto connected = tocl::DirectoryClient::Connect();
    if (!connected.ok()) {
      Say(stderr, "connect: " + connected.status().ToString());
      return 100;
    }
    client = std::move(*connected);
    tocl::EnrollOptions options;
    options.name = process_name;
    options.attributes = attributes;
    auto enrolled = client->Enroll(options);
    if (!enrolled.ok()) {
      Say(stderr, "enroll: " + enrolled.status().ToString());
      return 100;
    }
    session = std::move(*enrolled);
    Say(stdout, "gid " + session->gid().ToString());
  }
  for (const std::string& name : print_env) {
    const char* value = std::getenv(name.c_str());
    Say(stdout, value != nullptr ? fmt::format("env {}={}", name, value)
                                 : fmt::format("env {} unset", name));
  }
  if (print_cwd) {
    char cwd[PATH_MAX] = {};
    Say(stdout, fmt::format("cwd {}", ::getcwd(cwd, sizeof(cwd)) != nullptr ? cwd : "?"));
  }
  for (const std::string& line : say) Say(stdout, line);
  for (const std::string& line : complain) Say(stderr, line);
  for (size_t i = 0; i < bytes; ++i) std::fputc('0' + static_cast<int>(i % 10), stdout);
  std::fflush(stdout);

  if (then == "wait") {
    // A test that fails before it ends us must not leave us running (the
    // daemon's children outlive it): SIGALRM ends us after a minute.
    ::alarm(60);
    for (;;) ::pause();
  }
  if (then == "crash") std::_Exit(status);
  if (session) (void)session->Close("done");
  if (runtime) (void)runtime->Shutdown();
  return status;
}
