#include "tocl/gid.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>

namespace tocl {
namespace {

// The error of a text that must not parse; it must be InvalidArgument and
// quote the text.
std::string ParseError(std::string_view text) {
  Result<Gid> gid = Gid::Parse(text);
  INFO("text: '" << text << "'");
  REQUIRE_FALSE(gid.ok());
  CHECK(gid.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(gid.status().message(),
             Catch::Contains("'" + std::string(text) + "'", Catch::CaseSensitive::Yes));
  return gid.status().message();
}

Gid MustParse(std::string_view text) {
  Result<Gid> gid = Gid::Parse(text);
  INFO("text: '" << text << "'");
  REQUIRE(gid.status().message() == "");
  return *gid;
}

static_assert(Gid::Thread(3, 17, 5).raw() == ((uint64_t{3} << 48) | (uint64_t{17} << 24) | 5));
static_assert(Gid::Thread(3, 17, 5).process() == Gid::Process(3, 17));
static_assert(Gid::Thread(3, 17, 5).host() == Gid::Host(3));
static_assert(Gid().is_null() && !Gid().valid());

TEST_CASE("a thread id is built from its three indexes and read back", "[gid]") {
  Gid gid = Gid::Thread(3, 17, 5);
  CHECK(gid.host_index() == 3);
  CHECK(gid.process_index() == 17);
  CHECK(gid.thread_index() == 5);
  CHECK(gid.is_thread());
  CHECK_FALSE(gid.is_process());
  CHECK_FALSE(gid.is_host());
  CHECK(gid.valid());
  CHECK_FALSE(gid.is_null());
  CHECK(gid.host() == Gid::Host(3));
  CHECK(gid.process() == Gid::Process(3, 17));
  CHECK(gid.ToString() == "h3.p17.t5");
}

TEST_CASE("the host and process of each kind of id are read off the id", "[gid]") {
  Gid host = Gid::Host(3);
  CHECK(host.is_host());
  CHECK_FALSE(host.is_process());
  CHECK_FALSE(host.is_thread());
  CHECK(host.host() == host);
  CHECK(host.process().is_null());
  CHECK(host.ToString() == "h3");

  Gid process = Gid::Process(3, 17);
  CHECK(process.is_process());
  CHECK_FALSE(process.is_host());
  CHECK_FALSE(process.is_thread());
  CHECK(process.host() == host);
  CHECK(process.process() == process);
  CHECK(process.ToString() == "h3.p17");
}

TEST_CASE("the null id is not valid and prints as null", "[gid]") {
  Gid null;
  CHECK(null.raw() == 0);
  CHECK(null.is_null());
  CHECK_FALSE(null.valid());
  CHECK_FALSE(null.is_host());
  CHECK_FALSE(null.is_process());
  CHECK_FALSE(null.is_thread());
  CHECK(null.ToString() == "null");
}

TEST_CASE("a raw id without a host or with a thread but no process is invalid", "[gid]") {
  Gid no_host = Gid::FromRaw((uint64_t{1} << 24) | 5);  // p1.t5 without a host
  CHECK_FALSE(no_host.valid());
  CHECK_FALSE(no_host.is_thread());
  CHECK(no_host.ToString() == "invalid(0x0000000001000005)");

  Gid no_process = Gid::FromRaw((uint64_t{1} << 48) | 5);  // h1.t5 without a process
  CHECK_FALSE(no_process.valid());
  CHECK_FALSE(no_process.is_thread());
  CHECK_FALSE(no_process.is_host());
  CHECK(no_process.ToString() == "invalid(0x0001000000000005)");
}

TEST_CASE("ids round-trip through their text form", "[gid]") {
  for (Gid gid : {Gid::Host(1), Gid::Host(3), Gid::Process(3, 17), Gid::Thread(3, 17, 5),
                  Gid::Thread(1, 1, 1), Gid::Host(Gid::kMaxHost),
                  Gid::Process(Gid::kMaxHost, Gid::kMaxProcess),
                  Gid::Thread(Gid::kMaxHost, Gid::kMaxProcess, Gid::kMaxThread),
                  Gid::Thread(1, Gid::kMaxProcess, 1), Gid::Thread(1, 1, Gid::kMaxThread)}) {
    INFO("gid: " << gid.ToString());
    CHECK(MustParse(gid.ToString()) == gid);
  }
  for (std::string_view text : {"h1", "h3.p17", "h3.p17.t5", "h10.p100.t1000", "h65535",
                                "h65535.p16777215", "h65535.p16777215.t16777215"}) {
    CHECK(MustParse(text).ToString() == text);
  }
}

TEST_CASE("the largest indexes fill all 64 bits", "[gid]") {
  CHECK(Gid::kMaxHost == 65535);
  CHECK(Gid::kMaxProcess == 16777215);
  CHECK(Gid::kMaxThread == 16777215);
  Gid max = MustParse("h65535.p16777215.t16777215");
  CHECK(max.raw() == UINT64_MAX);
  CHECK(max.host_index() == 65535);
  CHECK(max.process_index() == 16777215);
  CHECK(max.thread_index() == 16777215);
  CHECK(max.host() == Gid::Host(65535));
  CHECK(max.process() == Gid::Process(65535, 16777215));
}

TEST_CASE("Make builds ids from indexes in range", "[gid]") {
  Result<Gid> host = Gid::Make(3);
  REQUIRE(host.ok());
  CHECK(*host == Gid::Host(3));
  Result<Gid> process = Gid::Make(3, 17);
  REQUIRE(process.ok());
  CHECK(*process == Gid::Process(3, 17));
  Result<Gid> thread = Gid::Make(3, 17, 5);
  REQUIRE(thread.ok());
  CHECK(*thread == Gid::Thread(3, 17, 5));
  Result<Gid> max = Gid::Make(Gid::kMaxHost, Gid::kMaxProcess, Gid::kMaxThread);
  REQUIRE(max.ok());
  CHECK(max->raw() == UINT64_MAX);
}

TEST_CASE("Make says which index is out of range", "[gid]") {
  struct Case {
    uint32_t host, process, thread;
    std::string message;
  };
  for (const Case& c : {
           Case{0, 0, 0, "host index 0 is out of range (1..65535)"},
           Case{65536, 0, 0, "host index 65536 is out of range (1..65535)"},
           Case{1, 16777216, 0, "process index 16777216 is out of range (1..16777215)"},
           Case{1, 1, 16777216, "thread index 16777216 is out of range (1..16777215)"},
           Case{1, 0, 5, "a thread id needs a process index"},
           Case{UINT32_MAX, 1, 1, "host index 4294967295 is out of range (1..65535)"},
       }) {
    Result<Gid> gid = Gid::Make(c.host, c.process, c.thread);
    INFO("make(" << c.host << ", " << c.process << ", " << c.thread << ")");
    REQUIRE_FALSE(gid.ok());
    CHECK(gid.status().code() == StatusCode::kInvalidArgument);
    CHECK(gid.status().message() == c.message);
  }
}

TEST_CASE("every malformed id text is rejected with a message quoting it", "[gid]") {
  const std::string long_digits(40, '9');
  const std::string long_zeros = "1" + std::string(30, '0');
  for (std::string text : {std::string(""),
                           std::string("h"),
                           std::string("h0"),
                           std::string("H3"),
                           std::string("x3"),
                           std::string("h03"),
                           std::string("h3."),
                           std::string("h3.p"),
                           std::string("h3.p0"),
                           std::string("h3.t5"),
                           std::string("h3.p17.t"),
                           std::string("h3.p17.t0"),
                           std::string("h3.p17.t5."),
                           std::string("h3.p17.t5x"),
                           std::string("h65536"),
                           std::string("h3.p16777216"),
                           std::string("h3.p1.t16777216"),
                           std::string(" h3"),
                           std::string("h3 "),
                           std::string("h-1"),
                           std::string("h+1"),
                           std::string("h3..p1"),
                           std::string("h1.p1.t1.t1"),
                           std::string("h1.p01"),
                           std::string("h1.p1.t01"),
                           std::string("h00"),
                           std::string("p1"),
                           std::string("t1"),
                           std::string(".h1"),
                           std::string("h1.P1"),
                           std::string("h1.p1.T1"),
                           std::string("h1,p1"),
                           std::string("h\xc2\xb3"),
                           std::string("h3\0", 3),
                           "h" + long_digits,
                           "h1.p" + long_digits,
                           "h1.p1.t" + long_digits,
                           "h" + long_zeros,
                           "h1.p1.t" + long_zeros,
                           "h0" + long_digits}) {
    ParseError(text);
  }
}

TEST_CASE("malformed ids get messages that say what is wrong and where", "[gid]") {
  CHECK(ParseError("") == "bad id '': empty (expected e.g. h3, h3.p17 or h3.p17.t5)");
  CHECK(ParseError("h") == "bad id 'h': expected a host number after 'h'");
  CHECK(ParseError("h0") == "bad id 'h0': host number 0 is reserved (1..65535)");
  CHECK(ParseError("H3") == "bad id 'H3': expected 'h' at position 0");
  CHECK(ParseError(" h3") == "bad id ' h3': expected 'h' at position 0");
  CHECK(ParseError("h03") == "bad id 'h03': host number has a leading zero");
  CHECK(ParseError("h3.") == "bad id 'h3.': expected 'p' at position 3");
  CHECK(ParseError("h3.t5") == "bad id 'h3.t5': expected 'p' at position 3");
  CHECK(ParseError("h3..p1") == "bad id 'h3..p1': expected 'p' at position 3");
  CHECK(ParseError("h3.p") == "bad id 'h3.p': expected a process number after 'p'");
  CHECK(ParseError("h3.p0") == "bad id 'h3.p0': process number 0 is reserved (1..16777215)");
  CHECK(ParseError("h3.p17.t") == "bad id 'h3.p17.t': expected a thread number after 't'");
  CHECK(ParseError("h3.p17.t0") == "bad id 'h3.p17.t0': thread number 0 is reserved (1..16777215)");
  CHECK(ParseError("h3.p17.t5.") == "bad id 'h3.p17.t5.': unexpected '.' at position 9");
  CHECK(ParseError("h3.p17.t5x") == "bad id 'h3.p17.t5x': unexpected 'x' at position 9");
  CHECK(ParseError("h3 ") == "bad id 'h3 ': unexpected ' ' at position 2");
  CHECK(ParseError("h3.p17x") == "bad id 'h3.p17x': unexpected 'x' at position 6");
  CHECK(ParseError("h1.p1.t1.t1") == "bad id 'h1.p1.t1.t1': unexpected '.' at position 8");
  CHECK(ParseError("h-1") == "bad id 'h-1': expected a host number after 'h'");
  CHECK(ParseError("h+1") == "bad id 'h+1': expected a host number after 'h'");
  CHECK(ParseError("h65536") == "bad id 'h65536': host number is out of range (1..65535)");
  CHECK(ParseError("h3.p16777216") ==
        "bad id 'h3.p16777216': process number is out of range (1..16777215)");
  const std::string huge = "h" + std::string(40, '9');
  CHECK(ParseError(huge) == "bad id '" + huge + "': host number is out of range (1..65535)");
  const std::string huge_thread = "h1.p1.t" + std::string(25, '1');
  CHECK(ParseError(huge_thread) ==
        "bad id '" + huge_thread + "': thread number is out of range (1..16777215)");
}

TEST_CASE("ids order by host, then process, then thread", "[gid]") {
  CHECK(Gid::Host(1) < Gid::Thread(1, 1, 1));
  CHECK(Gid::Thread(1, 1, 5) < Gid::Process(1, 2));
  CHECK(Gid::Thread(1, 1, Gid::kMaxThread) < Gid::Process(1, 2));
  CHECK(Gid::Process(1, Gid::kMaxProcess) < Gid::Host(2));
  CHECK(Gid::Thread(2, 1, 1) > Gid::Thread(1, 9, 9));
  CHECK(Gid::Process(3, 17) == Gid::Thread(3, 17, 5).process());
  CHECK(Gid::Process(3, 17) != Gid::Thread(3, 17, 5));
}

TEST_CASE("equal ids hash alike and different ids are told apart in a set", "[gid]") {
  std::unordered_set<Gid> set = {Gid::Host(1), Gid::Process(1, 1), Gid::Thread(1, 1, 1),
                                 Gid::Thread(1, 1, 2)};
  CHECK(set.size() == 4);
  CHECK(set.contains(MustParse("h1.p1.t2")));
  CHECK_FALSE(set.contains(MustParse("h1.p1.t3")));
  CHECK(std::hash<Gid>{}(Gid::Thread(1, 1, 1)) == std::hash<Gid>{}(MustParse("h1.p1.t1")));
}

}  // namespace
}  // namespace tocl
