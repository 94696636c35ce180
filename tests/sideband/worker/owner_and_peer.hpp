#pragma once
// The worker tests' world: a real server of the parameter's channel ("http" or "nats"), the
// owner's client of it, and the peer's client and connector. The peer's connector takes tcp
// alone: its bytes come over a real socket, which ends with the owner's process (or stalls
// while that is stopped).

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "memwire/connector.hpp"
#include "sideband/conformance/channel_world.hpp"
#include "support/tcp_only.hpp"

namespace memwire::sideband {

class OwnerAndPeerChannels : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    world_ = conformance::make_channel_world(GetParam());
    owner_channel_ = world_->connect();
    peer_channel_ = world_->connect();
    peer_connector_ = std::make_unique<Connector>(test_support::tcp_only());
  }

  std::unique_ptr<conformance::ChannelWorld> world_;
  std::unique_ptr<Channel> owner_channel_;
  std::unique_ptr<Channel> peer_channel_;
  std::unique_ptr<Connector> peer_connector_;
};

}  // namespace memwire::sideband
