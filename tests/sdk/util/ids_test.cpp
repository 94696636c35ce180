// Ids (sdk/src/util/ids.*): 128-bit random ids and their text, 32 lower-case hex digits. A text
// that is not exactly that is no id: a token with any character changed, its case included, is
// another token.
#include "util/ids.hpp"

#include <gtest/gtest.h>

#include <string>

using namespace memwire;

TEST(Ids, TextRoundTripsAndNamesTheSameId) {
  for (int n = 0; n < 100; ++n) {
    const auto id = random_id();
    const auto text = to_hex(id);
    ASSERT_EQ(text.size(), 32u);
    EXPECT_EQ(parse_id(text), id) << text;
  }
  EXPECT_EQ(to_hex(*parse_id("00112233445566778899aabbccddeeff")),
            "00112233445566778899aabbccddeeff");
}

TEST(Ids, EveryCharacterThatIsNoLowerCaseHexDigitIsRefusedWherever) {
  const std::string good = "0123456789abcdef0123456789abcdef";
  ASSERT_TRUE(parse_id(good));
  for (std::size_t at = 0; at < good.size(); ++at) {
    for (int c = 0; c < 256; ++c) {
      const bool digit = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
      auto text = good;
      text[at] = static_cast<char>(c);
      EXPECT_EQ(parse_id(text).has_value(), digit) << "character " << c << " at " << at;
    }
  }
  EXPECT_FALSE(parse_id("0123456789ABCDEF0123456789abcdef")) << "upper case";
  EXPECT_FALSE(parse_id(good.substr(1)));
  EXPECT_FALSE(parse_id(good + "0"));
  EXPECT_FALSE(parse_id(""));
}
