// JsonWriter writes the metadata documents and the event log: its text must be JSON that reads
// back as what was written, whatever bytes a string holds, and the same text nlohmann's dump()
// wrote before it replaced that library in sdk/src.
#include "util/json_writer.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

using memwire::JsonWriter;

namespace {

std::string written(std::string_view text) {
  std::string out;
  JsonWriter(out).value(text);
  return out;
}

std::string dumped(std::string_view text) {
  return nlohmann::json(std::string(text))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

TEST(JsonWriter, EscapesStringsAsNlohmannDid) {
  std::vector<std::string> texts = {
      "",     "plain",     "a\"b", "back\\slash", "h\u00e9st", "\xf0\x9f\x98\x80 emoji",
      "\x7f", "tab\there", "/"};
  for (int c = 0; c < 0x20; ++c) texts.push_back("x" + std::string(1, static_cast<char>(c)) + "y");
  for (const auto& text : texts) {
    EXPECT_EQ(written(text), dumped(text)) << text;
    EXPECT_EQ(nlohmann::json::parse(written(text)).get<std::string>(), text);
  }
}

// Bytes that are not UTF-8 become U+FFFD, one for each maximal invalid sequence, and the text
// stays JSON; the valid characters around them are kept.
TEST(JsonWriter, ReplacesBytesThatAreNotUtf8) {
  const std::string kReplaced = "\xef\xbf\xbd";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"\xff", kReplaced},
      {"a\xc3", "a" + kReplaced},                           // cut short at the end
      {"\xc3(", kReplaced + "("},                           // cut short by ASCII
      {"\xe2\x82", kReplaced},                              // one maximal part: one replacement
      {"\xed\xa0\x80", kReplaced + kReplaced + kReplaced},  // a surrogate
      {"\xc0\xaf", kReplaced + kReplaced},                  // overlong
      {"\xf4\x90\x80\x80", kReplaced + kReplaced + kReplaced + kReplaced},  // past U+10FFFF
      {"ok\xe2\x82\xac", "ok\xe2\x82\xac"},                                 // the euro sign is fine
  };
  for (const auto& [text, expected] : cases) {
    EXPECT_EQ(written(text), "\"" + expected + "\"") << text;
    EXPECT_EQ(nlohmann::json::parse(written(text)).get<std::string>(), expected);
  }
}

TEST(JsonWriter, PutsCommasBetweenValuesAtEveryLevel) {
  std::string out;
  JsonWriter json(out);
  json.begin_object().key("a").value(std::uint64_t{18446744073709551615u});
  json.key("b").begin_array().value(std::int64_t{-5}).begin_array().end_array();
  json.begin_object().end_object().value("s").end_array();
  json.key("c").begin_object().key("d").value(0).end_object().end_object();
  EXPECT_EQ(out, R"({"a":18446744073709551615,"b":[-5,[],{},"s"],"c":{"d":0}})");
  EXPECT_TRUE(nlohmann::json::accept(out));
}
