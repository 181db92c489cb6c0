#include "tocl/entity.h"

#include <catch2/catch.hpp>
#include <string>
#include <string_view>

namespace tocl {
namespace {

void RequireInvalid(const Status& status, std::string_view mentions) {
  INFO("status: " << status.ToString());
  REQUIRE_FALSE(status.ok());
  CHECK(status.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(status.message(), Catch::Contains(std::string(mentions)));
}

TEST_CASE("the limits are the documented ones", "[entity]") {
  CHECK(kMaxNameBytes == 256);
  CHECK(kMaxAttributeKeyBytes == 256);
  CHECK(kMaxAttributeValueBytes == 4096);
  CHECK(kMaxAttributesPerEntity == 64);
}

TEST_CASE("a name of one to 256 bytes is accepted", "[entity]") {
  CHECK(ValidateName("thread", "w").ok());
  CHECK(ValidateName("thread", "merger 3 (rank 0)").ok());
  CHECK(ValidateName("thread", std::string(kMaxNameBytes, 'n')).ok());
  CHECK(ValidateName("thread", "w\xc3\xb6rker \xe2\x9c\x93").ok());  // UTF-8 bytes are not control
  std::string two_byte_letters;
  for (size_t i = 0; i < kMaxNameBytes / 2; ++i) two_byte_letters += "\xc3\xa9";  // é
  CHECK(ValidateName("thread", two_byte_letters).ok());
}

TEST_CASE("names and values that are not UTF-8 are rejected", "[entity]") {
  CHECK(ValidateName("thread", std::string(4, '\xc3')).code() == StatusCode::kInvalidArgument);
  CHECK(ValidateName("thread", "\xc0\xaf").code() == StatusCode::kInvalidArgument);  // overlong
  CHECK(ValidateName("thread", "\xed\xa0\x80").code() ==
        StatusCode::kInvalidArgument);  // surrogate
  CHECK(ValidateAttribute("role", "\xff").code() == StatusCode::kInvalidArgument);
  CHECK(ValidateAttribute("role", "\xf0\x9f\x98\x80").ok());  // U+1F600
}

TEST_CASE("an empty name is rejected naming what it is the name of", "[entity]") {
  Status status = ValidateName("process", "");
  RequireInvalid(status, "process");
  CHECK(status.message() == "process name is empty");
}

TEST_CASE("a name one byte over the limit is rejected with its length", "[entity]") {
  Status status = ValidateName("thread", std::string(kMaxNameBytes + 1, 'n'));
  RequireInvalid(status, "thread");
  CHECK(status.message() == "thread name is 257 bytes long (at most 256)");
  // Bytes, not characters: 129 two-byte characters are 258 bytes.
  std::string wide;
  for (int i = 0; i < 129; ++i) wide += "\xc3\xb6";
  RequireInvalid(ValidateName("thread", wide), "258 bytes");
}

TEST_CASE("a name with a control character is rejected", "[entity]") {
  for (char c : {'\0', '\x01', '\t', '\n', '\r', '\x1b', '\x1f', '\x7f'}) {
    std::string name = "ab";
    name.insert(name.begin() + 1, c);
    INFO("control byte " << static_cast<int>(c));
    Status status = ValidateName("host", name);
    RequireInvalid(status, "host");
    CHECK(status.message() == "host name contains a control character");
  }
  CHECK(ValidateName("host", " ").ok());  // 0x20 is the first printable byte
  CHECK(ValidateName("host", "~").ok());  // 0x7e is the last one before DEL
}

TEST_CASE("attribute keys of 1 to 256 bytes in the key syntax are accepted", "[entity]") {
  for (std::string key :
       {std::string("a"), std::string("_"), std::string("Z"), std::string("role"),
        std::string("A.b-c_9"), std::string("_leading_underscore"), std::string("x1.2.3"),
        std::string("kind.sub"), std::string("Kind"), std::string("names"), std::string("a-"),
        std::string(kMaxAttributeKeyBytes, 'k')}) {
    INFO("key: " << key);
    CHECK(ValidateAttribute(key, "v").ok());
  }
}

TEST_CASE("an empty attribute key is rejected", "[entity]") {
  Status status = ValidateAttribute("", "v");
  RequireInvalid(status, "key");
  CHECK(status.message() == "attribute key is empty");
}

TEST_CASE("an attribute key one byte over the limit is rejected with its length", "[entity]") {
  std::string key(kMaxAttributeKeyBytes + 1, 'k');
  Status status = ValidateAttribute(key, "v");
  RequireInvalid(status, "257 bytes long (at most 256)");
  // The message quotes only the start of the key.
  CHECK(status.message() ==
        "attribute key '" + std::string(32, 'k') + "...' is 257 bytes long (at most 256)");
}

TEST_CASE("attribute keys outside the key syntax are rejected quoting the key", "[entity]") {
  for (std::string key :
       {std::string("1abc"), std::string("-a"), std::string(".a"), std::string("a b"),
        std::string("a=b"), std::string("a/b"), std::string("a:b"), std::string("a\"b"),
        std::string("k\xc3\xa4y"), std::string("a\nb"), std::string("a\0b", 3), std::string(" a"),
        std::string("a "), std::string("9")}) {
    INFO("key: " << key);
    Status status = ValidateAttribute(key, "v");
    RequireInvalid(status, "must match [A-Za-z_][A-Za-z0-9_.-]*");
    CHECK_THAT(status.message(), Catch::Contains("'" + key + "'"));
  }
}

TEST_CASE("the reserved attribute keys are rejected and no others", "[entity]") {
  for (std::string_view key : {"kind", "name", "state", "host", "process", "pid", "gid"}) {
    INFO("key: " << key);
    CHECK(IsReservedAttributeKey(key));
    Status status = ValidateAttribute(key, "v");
    RequireInvalid(status, "is reserved");
    CHECK_THAT(status.message(), Catch::Contains("'" + std::string(key) + "'"));
  }
  for (std::string_view key : {"", "Kind", "KIND", "kinds", "gid2", "host.name", "pids", "rank"}) {
    INFO("key: " << key);
    CHECK_FALSE(IsReservedAttributeKey(key));
  }
}

TEST_CASE("attribute values up to 4096 bytes of any text are accepted", "[entity]") {
  CHECK(ValidateAttribute("k", "").ok());
  CHECK(ValidateAttribute("k", std::string(kMaxAttributeValueBytes, 'v')).ok());
  CHECK(ValidateAttribute("k", "line one\nline two\ttab \xe2\x9c\x93").ok());
}

TEST_CASE("an attribute value one byte over the limit is rejected with its length", "[entity]") {
  Status status = ValidateAttribute("blob", std::string(kMaxAttributeValueBytes + 1, 'v'));
  RequireInvalid(status, "blob");
  CHECK(status.message() == "attribute 'blob' value is 4097 bytes long (at most 4096)");
}

TEST_CASE("the key is checked before the value", "[entity]") {
  std::string big(kMaxAttributeValueBytes + 1, 'v');
  RequireInvalid(ValidateAttribute("kind", big), "reserved");
  RequireInvalid(ValidateAttribute("1x", big), "must match");
}

TEST_CASE("kinds, states and change operations have their names", "[entity]") {
  CHECK(EntityKindName(EntityKind::kHost) == "host");
  CHECK(EntityKindName(EntityKind::kProcess) == "process");
  CHECK(EntityKindName(EntityKind::kThread) == "thread");
  CHECK(EntityStateName(EntityState::kRunning) == "running");
  CHECK(EntityStateName(EntityState::kExited) == "exited");
  CHECK(ChangeOpName(ChangeOp::kAdded) == "added");
  CHECK(ChangeOpName(ChangeOp::kUpdated) == "updated");
  CHECK(ChangeOpName(ChangeOp::kExited) == "exited");
}

}  // namespace
}  // namespace tocl
