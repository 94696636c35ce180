#pragma once

// What the Channel conformance suite runs against, one per channel this build has: a real
// HttpEndpoint on a loopback port, or a real nats-server with JetStream in a temporary folder.
// Each test gets a fresh one, and the same cases run over both (ChannelConformance below).

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "memwire/sideband/channel.hpp"
#include "support/channels.hpp"

namespace memwire::sideband::conformance {

class ChannelWorld {
 public:
  virtual ~ChannelWorld() = default;
  // A new client of this world's registry, as another process would open one.
  virtual std::unique_ptr<Channel> connect() = 0;
  // A client that finds `document` stored under `name`, for an operation and for a pool, as a
  // foreign tool or a corrupted store would leave it. A server takes no such thing from a
  // Channel, so it is put around it: raw into the NATS bucket, or served by a stand-in HTTP
  // server.
  virtual std::unique_ptr<Channel> connect_with_stored(const std::string& name,
                                                       const std::string& document) = 0;
  // How soon an abandoned wait ends: at once over NATS, at the next progress tick of the HTTP
  // long poll (about a second; more under sanitizers).
  virtual std::chrono::milliseconds abandon_bound() const = 0;
};

// "http" or "nats" (memwire::test_support::enabled_channels()).
std::unique_ptr<ChannelWorld> make_channel_world(const std::string& channel);

// A world and two clients of it: the owner publishes and serves, the reader fetches and asks.
class ChannelConformance : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<ChannelWorld> world_ = make_channel_world(GetParam());
  std::unique_ptr<Channel> owner_ = world_->connect();
  std::unique_ptr<Channel> reader_ = world_->connect();
};

}  // namespace memwire::sideband::conformance

// Instantiates `suite` (a ChannelConformance) once per channel, named by the channel.
#define MEMWIRE_CHANNEL_CONFORMANCE(suite)                                                 \
  INSTANTIATE_TEST_SUITE_P(Channels, suite,                                                \
                           ::testing::ValuesIn(memwire::test_support::enabled_channels()), \
                           [](const auto& info) { return info.param; })
