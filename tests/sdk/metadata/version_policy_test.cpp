// docs/PROTOCOL.md, "Versions": what this build, as an older reader, does with a document a newer
// build wrote. Not JSON comes first, then another version (whatever else changed), then the
// first field that is wrong, by its path; unknown fields are refused, never skipped. Optional
// fields are written only when used, so a reader without them reads every other document.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "memwire/memwire.hpp"

using namespace memwire;
using nlohmann::json;

namespace {

json one_shot() {
  return json::parse(R"({
    "version": 1, "operation_kind": 1,
    "descriptors": [{"device": "cpu", "ptr": 4096, "size": 100}],
    "notification_key": "0123456789abcdef0123456789abcdef",
    "endpoint": {"connector": "c1", "host": "h", "transports": [{"name": "tcp", "address": "a"}]},
    "token": "fedcba9876543210fedcba9876543210", "expires_at": 0})");
}

json pool() {
  return json::parse(R"({
    "memwire_pool": 1, "name": "kv", "generation": 3,
    "regions": [{"device": "cpu", "base": 4096, "block_size": 64, "stride": 64, "count": 4}],
    "key": "0123456789abcdef0123456789abcdef", "token": "fedcba9876543210fedcba9876543210",
    "endpoint": {"connector": "c1", "host": "h", "transports": [{"name": "tcp", "address": "a"}]}})");
}

// The MetadataError `Metadata::from_json(text)` throws; fails the test when it accepts.
template <class Metadata>
MetadataError refusal(const std::string& text) {
  try {
    (void)Metadata::from_json(text);
  } catch (const MetadataError& error) {
    EXPECT_EQ(error.code(), ErrorCode::InvalidMetadata);
    return error;
  }
  ADD_FAILURE() << "accepted " << text;
  return MetadataError("", "", "");
}

// The fields in name order, as writers write them: the version comes after what is new.
template <class Metadata>
void expect_newer_version_named(json document, const char* version_field) {
  document[version_field] = 2;
  document["a_new_field"] = {{"x", 1}};
  const auto error = refusal<Metadata>(document.dump());
  EXPECT_EQ(error.field(), version_field);
  EXPECT_EQ(error.reason(), "unsupported version 2 (this build reads version 1)");
  // A value of the new version's that this one refuses on its own: the version still explains.
  document.erase("a_new_field");
  const auto transports = document["endpoint"]["transports"];
  document["endpoint"]["transports"] = json::array();
  EXPECT_EQ(refusal<Metadata>(document.dump()).field(), version_field);
  // Not an integer: no version at all, and that field is what is wrong.
  document["endpoint"]["transports"] = transports;
  document[version_field] = "2";
  EXPECT_EQ(refusal<Metadata>(document.dump()).reason(), "must be a non-negative integer");
}

}  // namespace

TEST(VersionPolicy, ANewerDocumentIsRefusedByItsVersion) {
  expect_newer_version_named<RdmaMetadata>(one_shot(), "version");
  expect_newer_version_named<PoolMetadata>(pool(), "memwire_pool");
}

TEST(VersionPolicy, AnOlderVersionIsRefusedToo) {
  auto document = one_shot();
  document["version"] = 0;
  EXPECT_EQ(refusal<RdmaMetadata>(document.dump()).reason(),
            "unsupported version 0 (this build reads version 1)");
}

TEST(VersionPolicy, UnknownFieldsAreRefusedByTheirPathAtEveryLevel) {
  auto document = one_shot();
  document["descriptors"][0]["stride"] = 64;
  auto error = refusal<RdmaMetadata>(document.dump());
  EXPECT_EQ(error.field(), "descriptors[0].stride");
  EXPECT_EQ(error.reason(), "unknown field");
  EXPECT_EQ(std::string(error.what()),
            "invalid metadata: field 'descriptors[0].stride': unknown field");
  auto groups = pool();
  groups["regions"][0]["layer"] = 7;
  error = refusal<PoolMetadata>(groups.dump());
  EXPECT_EQ(error.field(), "regions[0].layer");
  EXPECT_EQ(std::string(error.what()),
            "invalid metadata: pool metadata field 'regions[0].layer': unknown field");
  groups = pool();
  groups["endpoint"]["transports"][0]["priority"] = 1;
  EXPECT_EQ(refusal<PoolMetadata>(groups.dump()).field(), "endpoint.transports[0].priority");
}

TEST(VersionPolicy, TextThatIsNotJsonIsSaidFirst) {
  auto document = one_shot();
  document["version"] = 2;
  auto text = document.dump();
  text.pop_back();  // cut short: a newer version, and not JSON
  auto error = refusal<RdmaMetadata>(text);
  EXPECT_EQ(error.field(), "");
  EXPECT_TRUE(error.reason().starts_with("not JSON: ")) << error.reason();
  auto groups = pool().dump();
  groups.insert(1, "\"deep\":[[[[[[[[[[]]]]]]]]]],");
  error = refusal<PoolMetadata>(groups);
  EXPECT_EQ(error.field(), "");
  EXPECT_EQ(std::string(error.what()),
            "invalid metadata: pool metadata: nested deeper than 8 levels");
}

// What lets an older reader read a newer writer's documents that do not use what is new.
TEST(VersionPolicy, OptionalFieldsAreWrittenOnlyWhenUsed) {
  const auto metadata = RdmaMetadata::from_json(one_shot().dump());
  const auto written = json::parse(metadata.to_json());
  EXPECT_FALSE(written["endpoint"]["transports"][0].contains("keys"));
  EXPECT_FALSE(written["endpoint"]["transports"][0].contains("attributes"));
  const auto plain = json::parse(PoolMetadata::from_json(pool().dump()).to_json());
  EXPECT_FALSE(plain.contains("request"));
  EXPECT_FALSE(plain["regions"][0].contains("repeat"));
  const auto granted = PoolMetadata::from_json(pool().dump())
                           .for_request(std::string(32, 'c'), {"req-1", Access::Read, {{0, 2}}});
  EXPECT_EQ(json::parse(granted.to_json())["request"]["runs"], json::parse("[[0,2]]"));
}
