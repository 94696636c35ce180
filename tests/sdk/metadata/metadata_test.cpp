#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cctype>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "memwire/memwire.hpp"

using namespace memwire;
using nlohmann::json;

namespace {

json valid_document() {
  return json::parse(R"({
    "version": 1, "operation_kind": 1,
    "descriptors": [{"device": "cpu", "ptr": 4096, "size": 100}, {"device": "cpu", "ptr": 8192, "size": 5}],
    "notification_key": "0123456789abcdef0123456789abcdef",
    "endpoint": {"connector": "c1", "host": "h", "transports": [
      {"name": "verbs", "address": "10.0.0.1:7000", "keys": [17, 18]},
      {"name": "tcp", "address": "127.0.0.1:4000", "attributes": {"x": "y"}}]},
    "token": "fedcba9876543210fedcba9876543210",
    "expires_at": 0})");
}

// Expects MetadataError whose field (as data, and in its message) is or holds `field`.
void expect_rejected(const json& document, const std::string& field) {
  try {
    RdmaMetadata::from_json(document.dump());
    FAIL() << "accepted a document with a bad " << field;
  } catch (const MetadataError& error) {
    EXPECT_NE(error.field().find(field), std::string::npos)
        << "field '" << error.field() << "' is not " << field;
    EXPECT_NE(std::string(error.what()).find(field), std::string::npos)
        << "message '" << error.what() << "' does not name " << field;
  } catch (const Error& error) {
    ADD_FAILURE() << "not a MetadataError: " << error.what();
  }
}

}  // namespace

TEST(Metadata, RoundTripsThroughJson) {
  auto metadata = RdmaMetadata::from_json(valid_document().dump());
  EXPECT_EQ(metadata.operation_kind(), OperationKind::Read);
  ASSERT_EQ(metadata.descriptors().size(), 2u);
  EXPECT_EQ(metadata.descriptors()[0].ptr, 4096u);
  EXPECT_EQ(metadata.total_size(), 105u);
  EXPECT_EQ(metadata.endpoint().transports[0].keys, (std::vector<std::uint64_t>{17, 18}));
  EXPECT_EQ(metadata.endpoint().transports[1].attributes.at("x"), "y");
  EXPECT_EQ(RdmaMetadata::from_json(metadata.to_json()), metadata);
}

// to_json writes the descriptors itself (thousands in a KV cache): byte for byte what the json
// tree wrote, also with devices that change from one descriptor to the next and extreme numbers.
TEST(Metadata, WritesTheDocumentTheJsonTreeWrote) {
  EXPECT_EQ(RdmaMetadata::from_json(valid_document().dump()).to_json(), valid_document().dump());
  auto document = valid_document();
  document["descriptors"] = json::array();
  for (std::uint64_t i = 0; i < 2048; ++i)
    document["descriptors"].push_back(
        {{"device", "cuda:" + std::to_string(i % 3 == 0 ? 0 : 1)},
         {"ptr", i == 7 ? ~std::uint64_t(0) - 8192 : 4096 + i * 16384},
         {"size", i == 7 ? 8192 : 8192 + i}});
  document["expires_at"] = std::int64_t(1) << 50;
  document["operation_kind"] = 2;
  EXPECT_EQ(RdmaMetadata::from_json(document.dump()).to_json(), document.dump());
}

TEST(Metadata, KeepsNixlConnectFieldNames) {
  auto document = json::parse(RdmaMetadata::from_json(valid_document().dump()).to_json());
  for (const char* field : {"descriptors", "notification_key", "operation_kind"})
    EXPECT_TRUE(document.contains(field)) << field;
  EXPECT_TRUE(document["descriptors"][0].contains("device"));
  EXPECT_EQ(document["descriptors"][0]["device"], "cpu");
}

TEST(Metadata, RejectsWhatIsNotJson) {
  for (const char* text : {"", "{", "[]", "null", "42", "\"x\""}) {
    try {
      RdmaMetadata::from_json(text);
      FAIL() << "accepted '" << text << "'";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::InvalidMetadata);
    }
  }
}

TEST(Metadata, RejectsUnknownFields) {
  auto document = valid_document();
  document["surprise"] = 1;
  expect_rejected(document, "surprise");
  document = valid_document();
  document["descriptors"][0]["stride"] = 1;
  expect_rejected(document, "stride");
  document = valid_document();
  document["endpoint"]["transports"][0]["rkey"] = 1;
  expect_rejected(document, "rkey");
}

TEST(Metadata, RejectsMissingFields) {
  for (const char* field : {"version", "operation_kind", "descriptors", "notification_key",
                            "endpoint", "token", "expires_at"}) {
    auto document = valid_document();
    document.erase(field);
    expect_rejected(document, field);
  }
  auto document = valid_document();
  document["descriptors"][0].erase("size");
  expect_rejected(document, "size");
}

// The parser's field tables against the writer: every field to_json writes, at every level, is
// one the parser reads and, unless optional, one it reports by its full path when missing or
// repeated. A field added to one side only, or made optional by mistake, fails here.
TEST(Metadata, EveryFieldTheWriterWritesIsRequiredByItsPath) {
  const auto written = json::parse(RdmaMetadata::from_json(valid_document().dump()).to_json());
  const std::set<std::string> optional = {"endpoint.transports[0].keys",
                                          "endpoint.transports[1].attributes"};
  std::size_t checked = 0;
  // Each object in the document with its path ("" for the root) and a pointer to reach it.
  std::vector<std::pair<std::string, json::json_pointer>> objects = {{"", json::json_pointer()}};
  for (std::size_t next = 0; next < objects.size(); ++next) {
    const auto [path, pointer] = objects[next];
    for (const auto& [name, value] : written.at(pointer).items()) {
      const auto field = path.empty() ? name : path + "." + name;
      // An offer's attributes are free-form (any names): not a table of fields.
      if (value.is_object() && name != "attributes") objects.emplace_back(field, pointer / name);
      if (value.is_array())
        for (std::size_t i = 0; i < value.size(); ++i)
          if (value[i].is_object())
            objects.emplace_back(field + "[" + std::to_string(i) + "]", pointer / name / i);
      auto without = written;
      without.at(pointer).erase(name);
      ++checked;
      if (optional.contains(field)) {
        EXPECT_NO_THROW(RdmaMetadata::from_json(without.dump())) << field;
        continue;
      }
      try {
        RdmaMetadata::from_json(without.dump());
        ADD_FAILURE() << "accepted a document without " << field;
      } catch (const Error& error) {
        EXPECT_EQ(std::string(error.what()), "invalid metadata: field '" + field + "': missing");
      }
    }
  }
  EXPECT_EQ(checked, 22u);  // every field of valid_document(), none skipped
  // Repeated: the root's first field again, in front.
  const auto text = written.dump();
  const auto first = written.begin();
  try {
    RdmaMetadata::from_json("{\"" + first.key() + "\":" + first.value().dump() + "," +
                            text.substr(1));
    ADD_FAILURE() << "accepted " << first.key() << " twice";
  } catch (const Error& error) {
    EXPECT_EQ(std::string(error.what()),
              "invalid metadata: field '" + first.key() + "': appears twice");
  }
}

TEST(Metadata, RejectsWrongTypes) {
  auto document = valid_document();
  document["operation_kind"] = "read";
  expect_rejected(document, "operation_kind");
  document = valid_document();
  document["descriptors"][0]["ptr"] = "0x1000";
  expect_rejected(document, "ptr");
  document = valid_document();
  document["descriptors"][0]["size"] = -5;
  expect_rejected(document, "size");
  document = valid_document();
  document["descriptors"] = json::object();
  expect_rejected(document, "descriptors");
  document = valid_document();
  document["endpoint"]["transports"][0]["keys"] = {"a"};
  expect_rejected(document, "keys");
}

TEST(Metadata, RejectsNonsenseValues) {
  auto document = valid_document();
  document["descriptors"] = json::array();
  expect_rejected(document, "descriptors");
  document = valid_document();
  document["descriptors"][0]["ptr"] = 0;
  expect_rejected(document, "ptr");
  document = valid_document();
  document["descriptors"][0]["size"] = 0;
  expect_rejected(document, "size");
  document = valid_document();
  document["operation_kind"] = 3;
  expect_rejected(document, "operation_kind");
  document = valid_document();
  document["operation_kind"] = 0;
  expect_rejected(document, "operation_kind");
  document = valid_document();
  document["notification_key"] = "";
  expect_rejected(document, "notification_key");
  document = valid_document();
  document["token"] = "not-hex";
  expect_rejected(document, "token");
  document = valid_document();
  document["version"] = 2;
  expect_rejected(document, "version");
  document = valid_document();
  document["descriptors"][1]["device"] = "cuda:0";
  expect_rejected(document, "descriptors");
  document = valid_document();
  document["descriptors"][0]["device"] = "tpu";
  expect_rejected(document, "device");
  document = valid_document();
  document["descriptors"][0]["ptr"] = 0xffffffffffffffc0ull;  // + 100 bytes wraps
  expect_rejected(document, "descriptors[0]");
}

TEST(Metadata, RejectsMalformedEndpoint) {
  auto document = valid_document();
  document["endpoint"] = "tcp://x";
  expect_rejected(document, "endpoint");
  document = valid_document();
  document["endpoint"]["transports"] = json::array();
  expect_rejected(document, "transports");
  document = valid_document();
  document["endpoint"]["connector"] = "";
  expect_rejected(document, "connector");
  document = valid_document();
  document["endpoint"]["transports"][1].erase("name");
  expect_rejected(document, "name");
}

TEST(Metadata, RejectsBrokenTextAnywhereInTheDocument) {
  // Each case breaks an otherwise valid document in one place only.
  const auto text = valid_document().dump();
  auto with = [&](std::string_view from, std::string_view to) {
    auto changed = text;
    auto at = changed.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return changed.replace(at, from.size(), to);
  };
  const std::string cases[] = {
      text + " x",                                           // text after the object
      text + " {}",                                          // a second document
      text.substr(0, text.size() - 1),                       // cut short
      text.substr(0, text.size() / 2),                       // cut in the middle
      with("\"version\":1", "\"version\":1,\"version\":1"),  // a field twice
      with("\"expires_at\":0", "\"expires_at\":0,"),         // trailing comma
      with("\"version\":1", "\"version\":01"),               // leading zero
      with("\"host\":\"h\"", "\"host\":\"h\xff\""),          // not UTF-8
      with("\"host\":\"h\"", "\"host\":\"h\\q\""),           // bad escape
      with("\"host\":\"h\"", "\"host\":h"),                  // a bare word
  };
  for (const auto& broken : cases) {
    try {
      auto metadata = RdmaMetadata::from_json(broken);
      ADD_FAILURE() << "accepted '" << broken << "' as host '" << metadata.endpoint().host << "'";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::InvalidMetadata) << broken;
    }
  }
}

TEST(Metadata, ReadsEscapedStringsAndAnyFieldOrder) {
  auto document = valid_document();
  document["endpoint"]["host"] = "h\u00e9\"st";
  auto text = document.dump();
  // "cpu" spelled with an escape, fields of the first descriptor in another order.
  auto at = text.find(R"({"device":"cpu","ptr":4096,"size":100})");
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, std::string(R"({"device":"cpu","ptr":4096,"size":100})").size(),
               R"({"size":100,"device":"c\u0070u","ptr":4096})");
  auto metadata = RdmaMetadata::from_json(text);
  EXPECT_EQ(metadata.endpoint().host, "h\u00e9\"st");
  EXPECT_EQ(metadata.descriptors()[0].size, 100u);
  EXPECT_EQ(metadata.descriptors()[0].device.kind(), DeviceKind::Host);
}

namespace {

long peak_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

}  // namespace

// Issue 14 item 5: rejecting a hostile document costs about its size. 16 MB of '[' made the
// fallback DOM parse peak at ~700 MB.
TEST(Metadata, DeepNestingIsRejectedAtTheCostOfItsSize) {
  const std::vector<std::string> texts{std::string(16u << 20, '['),
                                       "{\"version\":" + std::string(16u << 20, '[')};
  const auto before = peak_rss_kib();
  for (const auto& text : texts) {
    try {
      RdmaMetadata::from_json(text);
      FAIL() << "accepted nested brackets";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::InvalidMetadata);
    }
  }
  // At most a copy of the text and parser buffers; never a tree of 16 M arrays.
  EXPECT_LT(peak_rss_kib() - before, 40 * 1024)
      << "peak grew by " << peak_rss_kib() - before << " KiB";
}

// Issue 14 item 1: an invalid UTF-8 byte must not end up raw in the message.
TEST(Metadata, InvalidUtf8IsRejectedWithAPrintableMessage) {
  for (std::string text :
       {std::string("\xff"), std::string("{\"version\":\xff}"), std::string("{\"a\xc3\":1}")}) {
    try {
      RdmaMetadata::from_json(text);
      FAIL() << "accepted invalid UTF-8";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::InvalidMetadata);
      for (unsigned char c : std::string(error.what())) {
        EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "raw byte " << int(c) << " in: " << error.what();
      }
      EXPECT_NO_THROW((void)json({{"error", error.what()}}).dump());
    }
  }
}

// Issue 14 item 11: sizes are bounded (kMaxTotalSize) and never overflow when summed.
TEST(Metadata, RejectsSizesPastTheLimitOrOverflowingTheirSum) {
  auto document = valid_document();
  document["descriptors"][0]["size"] = std::uint64_t(1) << 40;  // 1 TiB
  expect_rejected(document, "descriptors[0].size");

  document = valid_document();
  document["descriptors"][0]["ptr"] = 4096;
  document["descriptors"][0]["size"] = RdmaMetadata::kMaxTotalSize;
  document["descriptors"][1]["ptr"] = 4096;
  document["descriptors"][1]["size"] = 1;
  expect_rejected(document, "descriptors");

  // Two halves of 2^64: each alone in range of a pointer, their sum wraps to zero.
  document = valid_document();
  for (int i = 0; i < 2; ++i) {
    document["descriptors"][i]["ptr"] = 4096;
    document["descriptors"][i]["size"] = std::uint64_t(1) << 63;
  }
  expect_rejected(document, "descriptors");

  document = valid_document();
  document["descriptors"][0]["size"] = RdmaMetadata::kMaxTotalSize - 5;
  EXPECT_EQ(RdmaMetadata::from_json(document.dump()).total_size(), RdmaMetadata::kMaxTotalSize);

  document = valid_document();
  document["expires_at"] = "9223372036854775808";
  expect_rejected(document, "expires_at");
  auto text = valid_document().dump();
  auto at = text.find("\"expires_at\":0");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 14, "\"expires_at\":9223372036854775808");
  try {
    RdmaMetadata::from_json(text);
    FAIL() << "accepted an expiry past int64";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::InvalidMetadata);
  }
  document = valid_document();
  document["endpoint"]["transports"][0]["keys"] = json::array({17, 18, 19});
  expect_rejected(document, "keys");
}

namespace {

// `message` with each "column <digits>" as "column N". By hand: std::regex took more than
// half of the test's 24 s under ASan (thousands of messages).
std::string without_columns(std::string message) {
  const std::string column = "column ";
  for (auto at = message.find(column); at != std::string::npos; at = message.find(column, at)) {
    at += column.size();
    auto end = at;
    while (end < message.size() && std::isdigit(static_cast<unsigned char>(message[end]))) ++end;
    if (end > at) message.replace(at, end - at, "N");
  }
  return message;
}

// What from_json makes of `text`: the metadata written back, or the error's message (where a
// JSON syntax error is, by column, left out).
std::string outcome(const std::string& text) {
  try {
    return "accepted " + RdmaMetadata::from_json(text).to_json();
  } catch (const Error& error) {
    return "rejected (" + std::to_string(static_cast<int>(error.code())) + ") " +
           without_columns(error.what());
  }
}

}  // namespace

// A descriptor list written as to_json writes it is read without the JSON parser; a space after
// '[' sends the same document through the parser. Both must accept and reject alike, with the
// same message, whatever the descriptors hold.
TEST(Metadata, TheQuickDescriptorReaderAgreesWithTheParser) {
  auto document = valid_document();
  document.erase("descriptors");
  // Without the verbs offer's two keys: a list of one descriptor would be refused for them, and
  // every refusal looks alike (the whole text's first JSON error is what it reports).
  document["endpoint"]["transports"][0].erase("keys");
  const std::string others = document.dump().substr(1);  // `"endpoint":...}`
  const std::vector<std::string> lists = {
      R"({"device":"cpu","ptr":4096,"size":100},{"device":"cpu","ptr":8192,"size":5})",
      R"({"device":"cuda:1","ptr":4096,"size":100},{"device":"gpu:1","ptr":1,"size":1})",
      R"({"device":"cuda","ptr":4096,"size":1},{"device":"cuda:2","ptr":9,"size":1})",
      R"({"device":"cpu","ptr":18446744073709551614,"size":1})",
      R"({"device":"cpu","ptr":18446744073709551615,"size":1})",
      R"({"device":"cpu","ptr":9999999999999999999,"size":1})",
      R"({"device":"cpu","ptr":18446744073709551616,"size":1})",
      R"({"device":"cpu","ptr":0,"size":1})",
      R"({"device":"cpu","ptr":1,"size":0})",
      R"({"device":"cpu","ptr":01,"size":1})",
      R"({"device":"cpu","ptr":-1,"size":1})",
      R"({"device":"cpu","ptr":1.5,"size":1})",
      R"({"device":"cpu","ptr":1e3,"size":1})",
      R"({"device":"cpu","ptr":"4096","size":1})",
      R"({"device":"cpu","ptr":4096,"size":274877906944})",
      R"({"device":"cpu","ptr":4096,"size":274877906945})",
      R"({"device":"cpu","ptr":4096,"size":274877906944},{"device":"cpu","ptr":1,"size":1})",
      R"({"device":"tpu","ptr":4096,"size":1})",
      R"({"device":"CPU","ptr":4096,"size":1})",
      R"({"device":"cp\u0075","ptr":4096,"size":1})",
      R"({"device":"","ptr":4096,"size":1})",
      R"({"device":"cuda:99999999999","ptr":4096,"size":1})",
      R"({"device":"cpu","ptr":4096,"size":1},{"device":"cuda:0","ptr":4096,"size":1})",
      R"({"device":1,"ptr":4096,"size":1})",
      R"({"device":"cpu","ptr":4096,"size":1,"rkey":3})",
      R"({"device":"cpu","ptr":4096})",
      R"({"device":"cpu","ptr":4096,"ptr":4096,"size":1})",
      R"({"ptr":4096,"device":"cpu","size":1})",
      R"({"device":"cpu","ptr":4096,"size":1},)",
      R"({"device":"cpu","ptr":4096,"size":1}],"descriptors":[{"device":"cpu","ptr":1,"size":1})",
      R"({"device":"cpu","ptr":4096,"size":1}})",
      R"()",
      R"([])",
  };
  for (const auto& list : lists) {
    for (const std::string& end :
         std::vector<std::string>{"]," + others, "]}", "],}", "] ," + others, "]" + others}) {
      const std::string quick = R"({"descriptors":[)" + list + end;
      const std::string parsed = R"({"descriptors": [)" + list + end;
      EXPECT_EQ(outcome(quick), outcome(parsed)) << quick;
    }
  }
  // Numbers of every length, each cut at every place by a character next to the digits in
  // ASCII ('/' and ':' border them) or one a number may not hold: the reader must stop exactly
  // where the parser does.
  const std::string digits = "98765432109876543210";
  for (std::size_t length = 1; length <= digits.size(); ++length) {
    std::vector<std::string> numbers = {digits.substr(0, length),
                                        "1" + std::string(length - 1, '0')};
    for (std::size_t at = 1; at < length; ++at)
      for (char stranger : {'/', ':', ';', '?', '.', 'e', ' ', '\x7f', '\xb0'})
        numbers.push_back(digits.substr(0, at) + stranger + digits.substr(at, length - at));
    for (const auto& number : numbers) {
      for (const std::string& list : {R"({"device":"cpu","ptr":)" + number + R"(,"size":1})",
                                      R"({"device":"cpu","ptr":4096,"size":)" + number + "}"}) {
        const std::string quick = R"({"descriptors":[)" + list + "]," + others;
        const std::string parsed = R"({"descriptors": [)" + list + "]," + others;
        EXPECT_EQ(outcome(quick), outcome(parsed)) << quick;
      }
    }
  }
  // The limit on their number.
  std::string many = R"({"descriptors":[)";
  for (std::size_t i = 0; i <= RdmaMetadata::kMaxDescriptors; ++i)
    many += std::string(i > 0 ? "," : "") + R"({"device":"cpu","ptr":4096,"size":1})";
  many += "]," + others;
  EXPECT_EQ(outcome(many).substr(0, 9), "rejected ");
  EXPECT_EQ(outcome(many), outcome(R"({"descriptors": [)" + many.substr(16)));
}

// to_json writes numbers itself: every length of pointer, written and read back.
TEST(Metadata, WritesEveryLengthOfNumber) {
  std::vector<std::uint64_t> pointers = {1, ~std::uint64_t(0) - 1};
  for (std::uint64_t power = 10; power != 0 && power < ~std::uint64_t(0) / 10; power *= 10) {
    pointers.insert(pointers.end(), {power - 1, power, power + 1, power * 5 + 3});
  }
  pointers.push_back(std::uint64_t(10000000000000000000u));
  for (std::uint64_t ptr : pointers) {
    std::vector<RemoteDescriptor> descriptors{{Device{}, ptr, 1}};
    RdmaMetadata metadata({.kind = OperationKind::Read,
                           .descriptors = descriptors,
                           .notification_key = "0123456789abcdef0123456789abcdef",
                           .endpoint = {"c", "h", {TransportOffer{"tcp", "a", {}, {}}}},
                           .token = "fedcba9876543210fedcba9876543210",
                           .expires_at_ms = 0});
    const auto text = metadata.to_json();
    EXPECT_NE(text.find("\"ptr\":" + std::to_string(ptr) + ","), std::string::npos) << text;
    EXPECT_EQ(RdmaMetadata::from_json(text), metadata) << text;
  }
}
