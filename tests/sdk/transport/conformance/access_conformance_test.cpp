// Every transport refuses what the metadata does not allow: a forged token, an operation that
// ended (completed, cancelled, dropped, expired), a key that names nothing, more bytes than
// the owner registered. Memory stays untouched and the owner's operation stays as it was.
#include <algorithm>

#include "sdk/transport/conformance/forged_token_check.hpp"
#include "sdk/transport/conformance/transport_conformance.hpp"
#include "util/ids.hpp"

using namespace memwire;
using namespace memwire::test_support;
using namespace std::chrono_literals;

namespace {

class AccessConformance : public TransportConformance {};

bool all_equal(std::span<const std::byte> bytes, std::byte value) {
  return std::all_of(bytes.begin(), bytes.end(), [&](auto b) { return b == value; });
}

RdmaMetadata with_token(const RdmaMetadata& real, const std::string& token) {
  auto fields = real.fields();
  fields.token = token;
  return RdmaMetadata(std::move(fields));
}

RdmaMetadata with_sizes(const RdmaMetadata& real, std::uint64_t size) {
  auto fields = real.fields();
  for (auto& descriptor : fields.descriptors) descriptor.size = size;
  return RdmaMetadata(std::move(fields));
}

TEST_P(AccessConformance, ReadWithAForgedTokenIsRefusedBeforeAByteMoves) {
  Connector owner(options()), reader(options());
  std::vector<std::byte> source(4096), target(4096, std::byte{0x5a});
  fill_pattern(source, 3);
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  auto read = reader.begin_read(with_token(readable.metadata(), to_hex(random_id())),
                                {Descriptor(std::span(target))});
  EXPECT_EQ(failure_code(read, 30s), ErrorCode::AccessDenied) << read.error_message();
  EXPECT_TRUE(all_equal(target, std::byte{0x5a})) << "bytes arrived";
  EXPECT_EQ(readable.status(), OperationStatus::Initialized);  // still there for the real one
  auto real = reader.begin_read(readable.metadata(), {Descriptor(std::span(target))});
  EXPECT_EQ(real.wait_for_completion(30s), OperationStatus::Complete);
  EXPECT_EQ(first_mismatch(target, 3), target.size());
}

TEST_P(AccessConformance, WriteWithAForgedTokenIsRefusedAndLeavesTheTargetUntouched) {
  expect_forged_writes_refused(options(), options());
}

TEST_P(AccessConformance, AKeyThatNamesNothingIsNotFound) {
  Connector owner(options()), reader(options());
  std::vector<std::byte> source(4096), target(4096, std::byte{0x5a});
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  const auto real = readable.metadata();
  auto fields = real.fields();
  fields.notification_key = to_hex(random_id());
  RdmaMetadata unknown(std::move(fields));
  auto read = reader.begin_read(unknown, {Descriptor(std::span(target))});
  EXPECT_EQ(failure_code(read, 30s), ErrorCode::NotFound) << read.error_message();
  EXPECT_TRUE(all_equal(target, std::byte{0x5a}));
  EXPECT_EQ(readable.status(), OperationStatus::Initialized);
}

TEST_P(AccessConformance, ACancelledOperationIsNotFound) {
  Connector owner(options()), reader(options());
  std::vector<std::byte> source(4096), target(4096, std::byte{0x5a});
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  const auto metadata = readable.metadata();
  readable.cancel();
  auto read = reader.begin_read(metadata, {Descriptor(std::span(target))});
  EXPECT_EQ(failure_code(read, 30s), ErrorCode::NotFound) << read.error_message();
  EXPECT_TRUE(all_equal(target, std::byte{0x5a}));
}

TEST_P(AccessConformance, ADroppedWritableIsNotFoundAndItsMemoryUntouched) {
  Connector owner(options()), writer(options());
  std::vector<std::byte> target(4096, std::byte{0x5a}), source(4096, std::byte{0xa5});
  std::optional<RdmaMetadata> metadata;
  {
    auto writable = owner.create_writable({Descriptor(std::span(target))});
    metadata = writable.metadata();
  }
  auto write = writer.begin_write({Descriptor(std::span(source))}, *metadata);
  EXPECT_EQ(failure_code(write, 30s), ErrorCode::NotFound) << write.error_message();
  EXPECT_TRUE(all_equal(target, std::byte{0x5a})) << "a dropped writable was written";
}

TEST_P(AccessConformance, ACompletedOperationServesNoSecondTransfer) {
  Connector owner(options()), writer(options()), late(options());
  std::vector<std::byte> target(4096), source(4096), other(4096, std::byte{0xee});
  fill_pattern(source, 5);
  auto writable = owner.create_writable({Descriptor(std::span(target))});
  const auto metadata = writable.metadata();
  auto write = writer.begin_write({Descriptor(std::span(source))}, metadata);
  ASSERT_EQ(write.wait_for_completion(30s), OperationStatus::Complete);
  ASSERT_EQ(writable.wait_for_completion(30s), OperationStatus::Complete);
  auto again = late.begin_write({Descriptor(std::span(other))}, metadata);
  EXPECT_EQ(failure_code(again, 30s), ErrorCode::NotFound) << again.error_message();
  EXPECT_EQ(first_mismatch(target, 5), target.size()) << "written after it completed";
}

TEST_P(AccessConformance, ExpiredMetadataIsRefused) {
  auto short_lived = options();
  short_lived.metadata_ttl = 1ms;
  Connector owner(short_lived), reader(options());
  std::vector<std::byte> source(4096), target(4096);
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  const auto metadata = readable.metadata();
  std::this_thread::sleep_for(5ms);  // the metadata expires
  try {
    auto read = reader.begin_read(metadata, {Descriptor(std::span(target))});
    EXPECT_EQ(failure_code(read, 30s), ErrorCode::Expired);
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::Expired) << error.what();
  }
}

// Metadata with only the first of an operation's descriptors (built with the public
// constructor): the transfer of that part is refused completion and fails, and the failure
// reaches the owner. Never a silent completion of a part.
RdmaMetadata first_descriptor_only(const RdmaMetadata& real) {
  auto fields = real.fields();
  fields.descriptors.resize(1);
  return RdmaMetadata(std::move(fields));
}

TEST_P(AccessConformance, ReadingPartOfAReadableDoesNotCompleteIt) {
  Connector owner(options()), reader(options());
  std::vector<std::byte> source(4 * 4096), target(4096);
  std::vector<Descriptor> quarters;
  for (int i = 0; i < 4; ++i) quarters.emplace_back(std::span(source).subspan(i * 4096, 4096));
  auto readable = owner.create_readable(quarters);
  auto part = reader.begin_read(first_descriptor_only(readable.metadata()),
                                {Descriptor(std::span(target))});
  EXPECT_EQ(failure_code(part, 30s), ErrorCode::InvalidArgument) << part.error_message();
  EXPECT_NE(part.error_message().find("does not complete"), std::string::npos)
      << part.error_message();
  EXPECT_NE(failure_code(readable, 30s), ErrorCode::Protocol) << "the owner completed";
}

TEST_P(AccessConformance, WritingPartOfAWritableDoesNotCompleteIt) {
  Connector owner(options()), writer(options());
  std::vector<std::byte> target(2 * 4096), source(4096);
  auto writable = owner.create_writable(
      {Descriptor(std::span(target).first(4096)), Descriptor(std::span(target).subspan(4096))});
  auto part = writer.begin_write({Descriptor(std::span(source))},
                                 first_descriptor_only(writable.metadata()));
  EXPECT_EQ(failure_code(part, 30s), ErrorCode::InvalidArgument) << part.error_message();
  EXPECT_NE(failure_code(writable, 30s), ErrorCode::Protocol) << "the owner completed";
}

// Chunks past the owner's end are refused while earlier ones are still out: the read fails,
// in time, and nothing hangs when its connector goes.
TEST_P(AccessConformance, MetadataLargerThanTheRegistrationFailsInTime) {
  constexpr std::size_t kRegistered = 4u << 20, kDeclared = 32u << 20;
  std::vector<std::byte> source(kRegistered);
  Connector owner(options());
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  auto forged = with_sizes(readable.metadata(), kDeclared);
  within(60s, "a read of more than the owner registered", [&] {
    std::vector<std::byte> destination(kDeclared);
    auto reader = std::make_unique<Connector>(options());
    {
      auto read = reader->begin_read(forged, {Descriptor(std::span(destination))});
      try {
        read.wait_for_completion(30s);
        ADD_FAILURE() << "a read past the owner's registration completed";
      } catch (const Error& error) {
        EXPECT_NE(error.code(), ErrorCode::Timeout) << error.what();
      }
    }
    reader.reset();
  });
  EXPECT_NE(readable.status(), OperationStatus::Complete);
}

MEMWIRE_CONFORMANCE_SUITE(AccessConformance);

}  // namespace
