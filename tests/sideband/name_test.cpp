#include <gtest/gtest.h>

#include "memwire/error.hpp"
#include "memwire/sideband/channel.hpp"

namespace {

using memwire::Error;
using memwire::ErrorCode;
using memwire::sideband::validate_name;

TEST(NameRules, AcceptsTokensSeparatedByDots) {
  for (const char* name : {"a", "emb.req-1", "A_b-C.9.x", "tensor_0"}) {
    EXPECT_NO_THROW(validate_name(name)) << name;
  }
  EXPECT_NO_THROW(validate_name(std::string(200, 'x')));
}

TEST(NameRules, RejectsWhatSubjectsOrPathsCannotCarry) {
  for (const char* name :
       {"", ".a", "a.", "a..b", "a b", "a/b", "a*", "a>", "ä", "a%2f", "a\nb", "a?b", "a#b"}) {
    try {
      validate_name(name);
      ADD_FAILURE() << "accepted '" << name << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find("invalid name"), std::string::npos);
    }
  }
  EXPECT_THROW(validate_name(std::string(201, 'x')), Error);
}

TEST(NameRules, EscapesControlBytesInTheMessage) {
  try {
    validate_name(std::string("a\nb\x01", 4));
    FAIL();
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos);
    EXPECT_NE(what.find("\\x0a"), std::string::npos);
  }
}

}  // namespace
