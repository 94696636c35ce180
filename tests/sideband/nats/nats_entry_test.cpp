// The entry format of the NATS channel (KV value and responder reply), without a server.

#include <gtest/gtest.h>

#include <string>

#include "memwire/error.hpp"
#include "memwire/metadata.hpp"
#include "nats/entry.hpp"

namespace memwire::sideband::nats_detail {
namespace {

ErrorCode decode_error(const std::string& text) {
  try {
    decode_entry(text, "n");
  } catch (const Error& error) {
    return error.code();
  }
  ADD_FAILURE() << "decoded: " << text;
  return ErrorCode::Protocol;
}

TEST(NatsEntry, InlineRoundTrip) {
  const std::string metadata = R"({"version":1,"x":[1,2,{"y":"}"}]})";
  auto entry = decode_entry(encode_inline(metadata, 1234567890123), "n");
  EXPECT_EQ(entry.expires_at_ms, 1234567890123);
  EXPECT_EQ(entry.metadata_json, metadata);
  EXPECT_EQ(entry.parts, 0u);
  EXPECT_TRUE(entry.expired(1234567890123));
  EXPECT_FALSE(entry.expired(1234567890122));
  EXPECT_FALSE(decode_entry(encode_inline(metadata, 0), "n").expired(INT64_MAX));
}

TEST(NatsEntry, PartsRoundTrip) {
  auto entry = decode_entry(encode_parts(3, "abc123", 2500000, 42), "n");
  EXPECT_EQ(entry.parts, 3u);
  EXPECT_EQ(entry.part_key, "abc123");
  EXPECT_EQ(entry.size, 2500000u);
  EXPECT_EQ(entry.expires_at_ms, 42);
  EXPECT_TRUE(entry.metadata_json.empty());
}

TEST(NatsEntry, OtherSpellingsTakeTheCheckedPath) {
  // Spaces and field order differ from what we write: parsed in full, same result.
  auto entry = decode_entry(R"({ "metadata" : {"a":1}, "expires_at_ms" : 5 })", "n");
  EXPECT_EQ(entry.expires_at_ms, 5);
  EXPECT_EQ(entry.metadata_json, R"({"a":1})");
  // Bare metadata: taken whole, never expires.
  entry = decode_entry(R"({"version":1})", "n");
  EXPECT_EQ(entry.metadata_json, R"({"version":1})");
  EXPECT_EQ(entry.expires_at_ms, 0);
}

TEST(NatsEntry, MalformedIsInvalidMetadata) {
  for (const std::string text : {
           "",
           "not json",
           "[]",
           "42",
           R"({"expires_at_ms":1})",
           R"({"metadata":{}})",
           R"({"expires_at_ms":-1,"metadata":{}})",
           R"({"expires_at_ms":"1","metadata":{}})",
           R"({"expires_at_ms":1,"metadata":[]})",
           R"({"metadata":{},"expires_at_ms":1,"extra":1})",
           R"({"metadata":{},"expires_at_ms":1,"parts":1})",
           R"({"expires_at_ms":1,"parts":0,"part_key":"k","size":1})",
           R"({"expires_at_ms":1,"parts":1,"part_key":"a..b","size":1})",
           R"({"expires_at_ms":1,"parts":1,"part_key":"a.*","size":1})",
           R"({"expires_at_ms":1,"parts":1,"part_key":"a.>","size":1})",
           R"({"expires_at_ms":1,"parts":1,"part_key":"a.","size":1})",
           R"({"expires_at_ms":1,"parts":1,"part_key":"k","size":0})",
           R"({"expires_at_ms":1,"parts":1,"part_key":"k","size":99999999999})",
           R"({"expires_at_ms":1,"parts":1,"part_key":"k"})",
       }) {
    EXPECT_EQ(decode_error(text), ErrorCode::InvalidMetadata) << text;
  }
}

TEST(NatsEntry, FastPathLeavesTrailingGarbageToTheMetadataParser) {
  // The fast path hands over everything between "metadata": and the final brace; a trailing
  // field then makes the document invalid JSON, which RdmaMetadata::from_json rejects.
  auto entry = decode_entry(R"({"expires_at_ms":1,"metadata":{"a":1},"x":2})", "n");
  EXPECT_EQ(entry.metadata_json, R"({"a":1},"x":2)");
  try {
    RdmaMetadata::from_json(entry.metadata_json);
    ADD_FAILURE() << "accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::InvalidMetadata);
  }
}

}  // namespace
}  // namespace memwire::sideband::nats_detail
