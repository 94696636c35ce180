#pragma once

#include <memory>
#include <set>
#include <string>

#include "common/arguments.hpp"
#include "memwire/sideband/channel.hpp"

namespace memwire::services {

// The options every program takes to reach a sideband:
//   --http URL | --nats URL, --token T | --token-file F, --user U, --password P, --ca-file F
const std::set<std::string>& channel_option_names();

// Builds the channel the arguments name; UsageError when none or both are given.
std::unique_ptr<sideband::Channel> make_channel(const Arguments& arguments);

// A NAME given on the command line: sideband::validate_name's rules, as a UsageError (exit 2).
const std::string& checked_name(const std::string& name);

// "http" or "nats", for messages.
std::string channel_kind(const Arguments& arguments);

}  // namespace memwire::services
