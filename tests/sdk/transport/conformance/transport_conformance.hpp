#pragma once

// The transport conformance suite: the same transfer, access, race, revocation and peer-loss
// tests over every transport memwire builds. A test is written once against the public API;
// the parameter names the only transport both connectors may use. A transport that cannot
// start here (verbs without an RDMA device) skips with the reason: under integration/rxe the
// same binary runs its verbs cases in a Soft-RoCE guest.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/registration_table.hpp"
#include "memwire/memwire.hpp"
#include "support/operation_waits.hpp"
#include "support/pattern.hpp"
#include "telemetry/event_log.hpp"
#include "transport/registry.hpp"
#include "transport/transport.hpp"

namespace memwire::test_support {

inline const std::vector<std::string>& conformance_transports() {
  // The registry's list (sdk/src/transport/registry.cpp): a transport's folder adds it here.
  static const std::vector<std::string> transports = [] {
    std::vector<std::string> names;
    for (const auto name : detail::known_transports()) names.emplace_back(name);
    return names;
  }();
  return transports;
}

// Both connectors of a case use `transport` alone. `chunk` and `connections` shape the stream
// transports' requests; verbs ignores them.
inline ConnectorOptions conformance_options(const std::string& transport,
                                            std::size_t chunk = 1u << 20,
                                            unsigned connections = 2) {
  ConnectorOptions options;
  options.transports = {transport};
  options.tcp.chunk_size = chunk;
  options.tcp.connections_per_peer = connections;
  options.connect_timeout = std::chrono::seconds(5);
  // scripts/test runs the suite once more with two event loops per stream transport
  // (MEMWIRE_IO_THREADS=2, step io-threads-2: ctest -R '^(Transports|Sizes)/').
  if (const char* loops = std::getenv("MEMWIRE_IO_THREADS"))
    options.stream.io_threads = static_cast<unsigned>(std::strtoul(loops, nullptr, 10));
  // integration/rxe/run-tests runs the verbs cases with the default access (auto: windows on
  // rxe), then the cases that hand out keys (access, pools, request grants) with connection_pd.
  if (const char* access = std::getenv("MEMWIRE_TEST_ACCESS")) options.rdma.access = access;
  return options;
}

// Whether `transport` starts on this machine; the reason when it does not.
inline std::optional<std::string> transport_unavailable(const std::string& transport) {
  static std::map<std::string, std::optional<std::string>> known;
  if (auto found = known.find(transport); found != known.end()) return found->second;
  std::optional<std::string> reason;
  try {
    Connector probe(conformance_options(transport));
  } catch (const Error& error) {
    reason = transport + " cannot start here (" + error.what() + ")";
    if (transport == "verbs") *reason += "; its cases run under integration/rxe";
  }
  return known[transport] = reason;
}

// What `transport` claims beyond one-shot operations between connectors of one process, asked
// of the transport itself (transport/transport.hpp): a case that needs more skips, saying so.
struct TransportClaims {
  bool pools = false;
  bool other_processes = false;
};

inline const TransportClaims& transport_claims(const std::string& transport) {
  static std::map<std::string, TransportClaims> known;
  if (auto found = known.find(transport); found != known.end()) return found->second;
  detail::TransportContext context;
  context.connector_name = "claims-probe";
  context.hostname = "localhost";
  context.options = conformance_options(transport);
  context.registrations = std::make_shared<detail::RegistrationTable>();
  context.events =
      std::make_shared<const detail::EventLog>("claims-probe", LogLevel::Error, nullptr);
  const auto made = detail::make_transport(transport, context);
  return known[transport] = {made->serves_pools(), made->reaches_other_processes()};
}

class TransportConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (auto reason = transport_unavailable(transport())) GTEST_SKIP() << *reason;
  }
  const std::string& transport() const { return GetParam(); }
  const TransportClaims& claims() const { return transport_claims(transport()); }
  ConnectorOptions options(std::size_t chunk = 1u << 20, unsigned connections = 2) const {
    return conformance_options(transport(), chunk, connections);
  }
  // options(), the connector named `name` (the name a pool's peers know it by).
  ConnectorOptions options_named(const std::string& name) const {
    auto named = options();
    named.name = name;
    return named;
  }
  // For a peer process (tests/support/test_peer.cpp): the same transport.
  std::vector<std::string> peer_environment() const {
    std::vector<std::string> environment{"MEMWIRE_TRANSPORTS=" + transport()};
    if (const char* access = std::getenv("MEMWIRE_TEST_ACCESS"))
      environment.push_back(std::string("MEMWIRE_RDMA_ACCESS=") + access);
    return environment;
  }
};

// The pool suites: a transport that moves no pool blocks skips them.
class PoolTransportConformance : public TransportConformance {
 protected:
  void SetUp() override {
    TransportConformance::SetUp();
    if (!IsSkipped() && !claims().pools) GTEST_SKIP() << transport() << " moves no pool blocks";
  }
};

// A pool's memory for the grant and layer tests: `count` blocks of kBlock bytes, every byte
// `fill` to begin with.
struct FilledBlocks {
  static constexpr std::size_t kBlock = 4096;
  FilledBlocks(std::size_t count, char fill)
      : memory(count * kBlock, static_cast<std::byte>(fill)) {}
  std::vector<BlockRegion> regions() {
    return {{memory.data(), kBlock, 0, memory.size() / kBlock, {}}};
  }
  std::span<std::byte> block(std::size_t index) {
    return std::span(memory).subspan(index * kBlock, kBlock);
  }
  // Whether every byte of block `index` is `value`.
  bool block_is(std::size_t index, char value) const {
    for (std::size_t i = 0; i < kBlock; ++i)
      if (memory[index * kBlock + i] != static_cast<std::byte>(value)) return false;
    return true;
  }
  std::vector<std::byte> memory;
};

// Distinct buffers, one per descriptor, each with its own pattern seed.
struct ConformanceBuffers {
  explicit ConformanceBuffers(const std::vector<std::size_t>& sizes) {
    for (auto size : sizes) parts.emplace_back(size);
  }
  std::vector<Descriptor> descriptors() {
    std::vector<Descriptor> out;
    for (auto& part : parts) out.emplace_back(std::span(part));
    return out;
  }
  void fill(std::uint64_t seed) {
    for (std::size_t i = 0; i < parts.size(); ++i) fill_pattern(parts[i], seed + i);
  }
  // The first descriptor whose bytes differ from the pattern, or parts.size() when none does.
  std::size_t first_bad(std::uint64_t seed) const {
    for (std::size_t i = 0; i < parts.size(); ++i)
      if (first_mismatch(parts[i], seed + i) != parts[i].size()) return i;
    return parts.size();
  }
  std::vector<std::vector<std::byte>> parts;
};

}  // namespace memwire::test_support

#define MEMWIRE_CONFORMANCE_SUITE(Suite)                                                         \
  INSTANTIATE_TEST_SUITE_P(                                                                      \
      Transports, Suite, ::testing::ValuesIn(::memwire::test_support::conformance_transports()), \
      [](const ::testing::TestParamInfo<std::string>& info) { return info.param; })
