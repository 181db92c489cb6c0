// examples/ built against an installed tocl the ways the README shows
// (find_package with CMake, pkg-config with a plain compiler, and the
// static library) and run against the installed daemon: one, and a
// cluster of two on loopback for the spawn example.
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "install_support.h"
#include "test_daemon.h"

namespace tocl::testing {
namespace {

using std::chrono::seconds;

// Configures and builds examples/ against `prefix` in `build_dir`.
void BuildExamples(const std::string& prefix, const std::string& build_dir,
                   std::vector<std::string> extra_args = {}) {
  std::vector<std::string> configure = {
      Build().cmake,
      "-S",
      Build().source_dir + "/examples",
      "-B",
      build_dir,
      "-G",
      Build().generator,
      "-DCMAKE_PREFIX_PATH=" + prefix,
      "-DCMAKE_CXX_COMPILER=" + Build().cxx,
      "-DCMAKE_CXX_FLAGS=" + Build().cxx_flags + " -Wall -Wextra -Wpedantic -Werror",
      "-DCMAKE_EXE_LINKER_FLAGS=" + Build().exe_linker_flags};
  configure.insert(configure.end(), extra_args.begin(), extra_args.end());
  RunOk(configure);
  RunOk({Build().cmake, "--build", build_dir}, std::chrono::minutes(5));
}

// What follows `prefix` on the first complete line of `output` that starts
// with it; "" when there is none.
std::string LineAfter(const std::string& output, const std::string& prefix) {
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.starts_with(prefix) && !lines.eof()) return line.substr(prefix.size());
  }
  return "";
}

// Whether a line of `output` matches `pattern` (ECMAScript) as a whole.
bool HasLine(const std::string& output, const std::string& pattern) {
  const std::regex regex(pattern);
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    if (std::regex_match(line, regex)) return true;
  }
  return false;
}

// A daemon run from the installed toclsd.
DaemonOptions InstalledDaemon(const std::string& prefix, const std::string& name) {
  DaemonOptions options;
  options.toclsd_path = prefix + "/sbin/toclsd";
  options.host_name = name;
  return options;
}

// Runs the pong side of `pong`, then `ping` against it, both enrolled with
// `daemon`; checks the round trips.
void CheckPingPong(const std::string& pong, const std::string& ping, const Daemon& daemon) {
  const std::vector<std::string> env = {"TOCL_DAEMON=" + daemon.address()};
  Result<ChildProcess> echo =
      ChildProcess::Spawn({pong}, SpawnOptions{.output_path = "", .pipe_stdin = false, .env = env});
  REQUIRE(echo.status().message() == "");
  // Its first line of its own (the library may log before it).
  std::string pong_thread;
  REQUIRE(WaitUntil(
      [&] {
        pong_thread = LineAfter(echo->Output(), "pong thread ");
        return !pong_thread.empty();
      },
      seconds(10)));

  const std::string pinged = RunOk({ping, pong_thread, "3"}, std::chrono::seconds(30), env);
  CHECK_THAT(pinged, Catch::Contains("ping 1 came back from " + pong_thread) &&
                         Catch::Contains("ping 3 came back from " + pong_thread) &&
                         Catch::Contains("3 round trips"));
  // The pong side leaves when told bye.
  Result<int> status = echo->Wait(seconds(10));
  INFO(echo->Output());
  CHECK(status.value_or(-1) == 0);
}

TEST_CASE(
    "the examples build against the installed tocl with find_package and pkg-config and run "
    "against its daemons",
    "[install][examples]") {
  TempDir dir("tocl-examples-");
  const std::string prefix = InstallInto(dir);

  // CMake: find_package(tocl), libtocl.so.
  const std::string cmake_build = dir.File("cmake");
  BuildExamples(prefix, cmake_build);
  // CMake: find_package(tocl COMPONENTS static), libtocl.a.
  const std::string static_build = dir.File("static");
  BuildExamples(prefix, static_build, {"-DTOCL_EXAMPLES_STATIC=ON"});
  CHECK_THAT(RunOk({Build().readelf, "-d", static_build + "/pingpong"}),
             !Catch::Contains("libtocl.so"));
  CHECK_THAT(RunOk({Build().readelf, "-d", cmake_build + "/pingpong"}),
             Catch::Contains("libtocl.so.0"));
  // pkg-config and a plain compiler command, as the README shows it.
  const std::string pkg_config = RequireProgram("pkg-config");
  const std::string plain = dir.File("pingpong-pkg-config");
  ShellOk(Build().cxx + " " + Build().cxx_flags + " " + Build().exe_linker_flags +
              " -std=c++20 -Wall -Wextra -Werror -o " + plain + " " + Build().source_dir +
              "/examples/pingpong.cc $(" + pkg_config + " --cflags --libs tocl) -Wl,-rpath,$(" +
              pkg_config + " --variable=libdir tocl)",
          std::chrono::minutes(3),
          {"PKG_CONFIG_PATH=" + prefix + "/" + Build().libdir + "/pkgconfig"});
  CHECK(RunOk({plain, "--version"}) == "pingpong (tocl " + Build().version + ")\n");

  // Two daemons of the installed toclsd on loopback: h1 (seed) and h2. Only
  // h2 may spawn, and only the spawn example. (Messages between their
  // processes would need a cluster with credentials: loopback networks never
  // join two hosts; the spawn example needs none.)
  DaemonOptions seed_options = InstalledDaemon(prefix, "first");
  seed_options.listen = "127.0.0.1:0";
  seed_options.seed = true;
  seed_options.spawn_allow = {};
  Daemon seed(seed_options);
  REQUIRE(seed.Start().message() == "");
  DaemonOptions second_options = InstalledDaemon(prefix, "second");
  second_options.listen = "127.0.0.1:0";
  second_options.join = {seed.tcp_address().value()};
  char* spawn_path = ::realpath((cmake_build + "/spawn").c_str(), nullptr);
  REQUIRE(spawn_path != nullptr);
  second_options.spawn_allow = {spawn_path};
  ::free(spawn_path);
  Daemon second(second_options);
  REQUIRE(second.Start().message() == "");

  {  // pingpong: the CMake and pkg-config builds, the static and the shared one
    CheckPingPong(cmake_build + "/pingpong", plain, seed);
    CheckPingPong(static_build + "/pingpong", cmake_build + "/pingpong", seed);
  }

  {  // pipeline: the stages find each other by attribute, started in any order
    const std::vector<std::string> env = {"TOCL_DAEMON=" + seed.address()};
    const std::string pipeline = cmake_build + "/pipeline";
    Result<ChildProcess> sink = ChildProcess::Spawn(
        {pipeline, "sink"}, SpawnOptions{.output_path = "", .pipe_stdin = false, .env = env});
    REQUIRE(sink.status().message() == "");
    Result<ChildProcess> square = ChildProcess::Spawn(
        {pipeline, "square"}, SpawnOptions{.output_path = "", .pipe_stdin = false, .env = env});
    REQUIRE(square.status().message() == "");
    RunOk({pipeline, "source", "10"}, seconds(30), env);
    Result<int> sink_status = sink->Wait(seconds(20));
    INFO("sink: " << sink->Output() << "square: " << square->Output());
    CHECK(square->Wait(seconds(20)).value_or(-1) == 0);
    REQUIRE(sink_status.value_or(-1) == 0);
    CHECK(LineAfter(sink->Output(), "sink: ") == "the sum of the squares of 1..10 is 385");
  }

  {  // membership: the current set of a query, then it exits
    const std::string members =
        RunOk({cmake_build + "/membership", "kind=host and gid=h1", "--current"}, seconds(30),
              {"TOCL_DAEMON=" + seed.address()});
    CHECK(HasLine(members, "joined h1 .* \\(running\\)"));
    CHECK(HasLine(members, "current: 1 members"));
  }

  {  // spawn: a worker on the other host says hello, and its exit notice comes back
    const std::string spawned =
        RunOk({cmake_build + "/spawn"}, seconds(60), {"TOCL_DAEMON=" + seed.address()});
    CHECK(HasLine(spawned, "h2\\.p[0-9]+ exited: status 0 \\(.*\\)"));
    CHECK(HasLine(spawned,
                  "h2\\.p[0-9]+ wrote: hello from h2\\.p[0-9]+, spawned by h1\\.p[0-9]+\\.t1"));
  }

  {  // handlers: a service's handler answers each request; an ordered one keeps the log in order
    const std::string answered =
        RunOk({cmake_build + "/handlers"}, seconds(60), {"TOCL_DAEMON=" + seed.address()});
    CHECK(HasLine(answered, "7 squared is 49"));
    CHECK(HasLine(answered, "8 answers, log: 1 2 3 4 5 6 7 8"));
  }

  {  // multicast: three listeners get hello, the table and bye, in that order
    const std::vector<std::string> env = {"TOCL_DAEMON=" + seed.address()};
    const std::string multicast = cmake_build + "/multicast";
    Result<ChildProcess> listen =
        ChildProcess::Spawn({multicast, "listen", "3"},
                            SpawnOptions{.output_path = "", .pipe_stdin = false, .env = env});
    REQUIRE(listen.status().message() == "");
    const std::string sent = RunOk({multicast, "send", "3"}, seconds(60), env);
    CHECK(HasLine(sent, "the table: 3 of 3 delivered, [0-9]+ copies sent"));
    CHECK(HasLine(sent, "bye: 3 of 3 delivered"));
    REQUIRE(listen->Wait(seconds(30)).value_or(-1) == 0);
    const std::string heard = listen->Output();
    INFO(heard);
    CHECK(HasLine(heard, "h1\\.p[0-9]+\\.t[0-9]+: 1048576 bytes \\(from h1\\.p[0-9]+\\.t1\\)"));
    // Each listener's lines: hello, then the table, then bye.
    for (const std::string& thread : {std::string("t1"), std::string("t2"), std::string("t3")}) {
      const size_t hello = heard.find("." + thread + ": hello");
      const size_t table = heard.find("." + thread + ": 1048576 bytes");
      const size_t bye = heard.find("." + thread + ": bye");
      CHECK(hello != std::string::npos);
      CHECK(table != std::string::npos);
      CHECK(bye != std::string::npos);
      CHECK(hello < table);
      CHECK(table < bye);
    }
  }

  {  // packed: a header handler places an image's pixels; a reader reads a second one
    const std::string packed =
        RunOk({cmake_build + "/packed"}, seconds(60), {"TOCL_DAEMON=" + seed.address()});
    CHECK(HasLine(packed,
                  "placed 1048576 bytes in place \\(0 copied\\): 1024 x 1024 gray, checksum ok"));
    CHECK(HasLine(packed,
                  "unpacking a u64: invalid argument: piece 0: expected u64 \\(8 bytes\\), "
                  "found u32 \\(4 bytes\\)"));
    CHECK(HasLine(packed, "read 512 x 2048, 1048576 bytes, checksum ok"));
  }

  {  // requests: results collected from posted receives by WaitAny, a leftover one cancelled
    const std::string collected =
        RunOk({cmake_build + "/requests"}, seconds(60), {"TOCL_DAEMON=" + seed.address()});
    CHECK(HasLine(collected,
                  "worker 3: [0-9]+ values from h1\\.p[0-9]+\\.t[0-9]+ \\(a long message\\)"));
    CHECK(HasLine(collected, "4 results, 1 long"));
  }
}

}  // namespace
}  // namespace tocl::testing
