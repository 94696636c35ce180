#include "common/channel_options.hpp"

#include <iostream>
#include <string_view>

#include "common/token_file.hpp"
#include "memwire/error.hpp"
#include "memwire/sideband/config.hpp"
#include "memwire/sideband/http.hpp"
#if MEMWIRE_HAVE_NATS
#include "memwire/sideband/nats.hpp"
#endif

namespace memwire::services {

const std::set<std::string>& channel_option_names() {
  static const std::set<std::string> names{"--http",       "--nats",        "--token",
                                           "--token-file", "--password",    "--user",
                                           "--ca-file",    "--kv-replicas", "--inbox-prefix"};
  return names;
}

namespace {

// --token T or --token-file F (never both): the file keeps it out of the process list.
std::string token_of(const Arguments& arguments) {
  if (!arguments.has("--token-file")) return arguments.get("--token");
  if (arguments.has("--token")) throw UsageError("give --token or --token-file, not both");
  return read_token_file(arguments.get("--token-file"));
}

}  // namespace

const std::string& checked_name(const std::string& name) {
  try {
    sideband::validate_name(name);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  return name;
}

std::string channel_kind(const Arguments& arguments) {
  return arguments.has("--nats") ? "nats" : "http";
}

std::unique_ptr<sideband::Channel> make_channel(const Arguments& arguments) {
  bool http = arguments.has("--http");
  bool nats = arguments.has("--nats");
  if (http == nats) throw UsageError("give exactly one of --http URL or --nats URL");
  auto token = token_of(arguments);
  if (http) {
    sideband::HttpChannelOptions options;
    options.url = arguments.get("--http");
    options.token = token;
    options.user = arguments.get("--user");
    options.password = arguments.get("--password");
    options.ca_file = arguments.get("--ca-file");
    return std::make_unique<sideband::HttpChannel>(std::move(options));
  }
#if MEMWIRE_HAVE_NATS
  sideband::NatsOptions options;
  options.servers = {arguments.get("--nats")};
  options.token = token;
  options.user = arguments.get("--user");
  options.password = arguments.get("--password");
  options.ca_file = arguments.get("--ca-file");
  // Copies of the registry a channel creates: 0 = one per known server, up to 3.
  options.kv_replicas = static_cast<int>(arguments.get_uint("--kv-replicas", 0, 0, 5));
  // Where this client's replies come (default _INBOX_<user>): roles.conf lets each user read
  // its own only.
  options.inbox_prefix = arguments.get("--inbox-prefix");
  // Warnings about the registry's buckets (one with fewer copies than asked) go to stderr.
  options.log = [](std::string_view line) { std::cerr << line << '\n'; };
  return std::make_unique<sideband::NatsChannel>(std::move(options));
#else
  throw UsageError("this build has no NATS channel; use --http URL");
#endif
}

}  // namespace memwire::services
