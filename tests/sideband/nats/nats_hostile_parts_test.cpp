// Issue 23, finding 4: a registry entry that points at N pieces made fetch() do N sequential KV
// gets whatever its timeout (65,536 one-byte pieces took 13.2 s against 0.5 s). Now an entry
// with more pieces than its size needs is refused before any get, and no get starts past the
// caller's deadline. Against a real nats-server; the hostile entries are planted with nats.c.
#include <gtest/gtest.h>
#include <nats/nats.h>

#include <chrono>
#include <string>

#include "memwire/error.hpp"
#include "memwire/sideband/nats.hpp"
#include "support/error_code_of.hpp"
#include "support/nats_server.hpp"

namespace memwire::sideband {
namespace {

using namespace std::chrono_literals;
using test_support::NatsServer;
using test_support::NatsServerOptions;
using Clock = std::chrono::steady_clock;

// Writes what a hostile client would: `parts` one-byte pieces under "evil", and an entry under
// `name` that claims them with `size` bytes in all.
void plant_entry(const NatsServer& server, const std::string& name, std::size_t parts,
                 std::size_t size) {
  natsConnection* connection = nullptr;
  ASSERT_EQ(natsConnection_ConnectTo(&connection, server.url().c_str()), NATS_OK);
  jsCtx* js = nullptr;
  ASSERT_EQ(natsConnection_JetStream(&js, connection, nullptr), NATS_OK);
  kvStore* registry = nullptr;
  ASSERT_EQ(js_KeyValue(&registry, js, "memwire"), NATS_OK);
  kvConfig config;
  kvConfig_Init(&config);
  config.Bucket = "memwire_parts";
  config.History = 1;
  kvStore* pieces = nullptr;
  ASSERT_EQ(js_CreateKeyValue(&pieces, js, &config), NATS_OK);
  for (std::size_t i = 0; i < parts; ++i) {
    uint64_t revision = 0;
    // Under the entry's own key, as a reader requires.
    ASSERT_EQ(
        kvStore_PutString(&revision, pieces, (name + ".evil." + std::to_string(i)).c_str(), "x"),
        NATS_OK);
  }
  const std::string entry = R"({"expires_at_ms":0,"parts":)" + std::to_string(parts) +
                            R"(,"part_key":")" + name + R"(.evil","size":)" + std::to_string(size) +
                            "}";
  uint64_t revision = 0;
  ASSERT_EQ(kvStore_PutString(&revision, registry, name.c_str(), entry.c_str()), NATS_OK);
  kvStore_Destroy(pieces);
  kvStore_Destroy(registry);
  jsCtx_Destroy(js);
  natsConnection_Destroy(connection);
}

NatsOptions options_for(const NatsServer& server) {
  NatsOptions options;
  options.servers = {server.url()};
  return options;
}

TEST(NatsHostileParts, MorePiecesThanTheSizeNeedsAreRefusedAtOnce) {
  NatsServer server;
  NatsChannel reader(options_for(server));  // creates the registry bucket
  plant_entry(server, "hostile", 4000, 4000);
  const auto started = Clock::now();
  EXPECT_EQ(test_support::error_code_of([&] { reader.fetch("hostile", 500ms); }),
            ErrorCode::InvalidMetadata);
  const auto took = Clock::now() - started;
  std::cout << "fetch of an entry claiming 4000 one-byte pieces: "
            << std::chrono::duration<double>(took).count() << " s\n";
  // Two round trips (the publisher request, the registry get), no piece: before, 4000 gets.
  EXPECT_LT(took, 150ms);
}

TEST(NatsHostileParts, NoPieceIsReadPastTheCallersTimeout) {
  // A small max payload makes pieces small, so that 4000 of them make a plausible size.
  NatsServerOptions small;
  small.max_payload = 16384;
  NatsServer server(small);
  NatsChannel reader(options_for(server));
  const std::size_t pieces = 4000;
  plant_entry(server, "slow", pieces, pieces * reader.max_payload());
  for (auto timeout : {50ms, 200ms}) {
    const auto started = Clock::now();
    const auto code = test_support::error_code_of([&] { reader.fetch("slow", timeout); });
    const auto took = Clock::now() - started;
    // What is under test is the time bound. A fast machine may read every (missing) piece
    // before the timeout: then the entry is refused as the hostile one it is, in time.
    EXPECT_EQ(code, took < timeout ? ErrorCode::InvalidMetadata : ErrorCode::Timeout)
        << "after " << std::chrono::duration<double>(took).count() << " s";
    std::cout << "fetch with a " << timeout.count() << " ms timeout of an entry of " << pieces
              << " pieces: " << std::chrono::duration<double>(took).count() << " s\n";
    EXPECT_LT(took, timeout + 250ms);
  }
}

}  // namespace
}  // namespace memwire::sideband
