// Declared sizes are untrusted: a reader compares them with its own descriptors before
// anything else. (The data plane's races, over every transport, are in
// transport/conformance/lifecycle_conformance_test.cpp and
// transport/conformance/access_conformance_test.cpp.)
#include <gtest/gtest.h>

#include "memwire/memwire.hpp"

using namespace memwire;
using namespace std::chrono_literals;

namespace {

ConnectorOptions options_for(const std::string& transport) {
  ConnectorOptions options;
  options.transports = {transport};
  options.connect_timeout = 2s;
  return options;
}

// Item 11 of issue 14 (core part): declared sizes are untrusted. A reader compares them with
// its own descriptors before anything else; nothing is sized after them.
TEST(UntrustedSizes, HugeOrOverflowingDeclaredSizesAreRefusedBeforeAnyTransfer) {
  Connector owner(options_for("tcp")), reader(options_for("tcp"));
  std::vector<std::byte> source(4096), first(4096), second(4096);
  auto readable =
      owner.create_readable({Descriptor(std::span(source)), Descriptor(std::span(first))});
  const auto base = readable.metadata();
  auto declared = [&](std::uint64_t a, std::uint64_t b) {
    auto fields = base.fields();
    fields.descriptors[0].size = a;
    fields.descriptors[1].size = b;
    return RdmaMetadata(std::move(fields));
  };
  const std::uint64_t tebibyte = std::uint64_t{1} << 40, half = std::uint64_t{1} << 63;
  for (const auto& forged : {declared(tebibyte, 4096), declared(half, half), declared(~0ull, 2)}) {
    try {
      (void)reader.begin_read(forged,
                              {Descriptor(std::span(first)), Descriptor(std::span(second))});
      ADD_FAILURE() << "declared sizes not refused";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::SizeMismatch) << error.what();
    }
  }
  EXPECT_EQ(readable.status(), OperationStatus::Initialized);  // the owner was never contacted
}

}  // namespace
