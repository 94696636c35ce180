#pragma once

#include <memory>
#include <set>
#include <string>

#include "common/arguments.hpp"
#include "memwire/sideband/channel.hpp"

namespace memwire::services {

// The options every program takes to reach a sideband:
//   --http URL | --nats URL, --token T, --user U, --password P, --ca-file F
const std::set<std::string>& channel_option_names();

// Builds the channel the arguments name; UsageError when none or both are given.
std::unique_ptr<sideband::Channel> make_channel(const Arguments& arguments);

// "http" or "nats", for messages.
std::string channel_kind(const Arguments& arguments);

}  // namespace memwire::services
