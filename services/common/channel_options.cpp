#include "common/channel_options.hpp"

#include "memwire/sideband/http.hpp"
#if MEMWIRE_SERVICES_HAVE_NATS
#include "memwire/sideband/nats.hpp"
#endif

namespace memwire::services {

const std::set<std::string>& channel_option_names() {
  static const std::set<std::string> names{"--http", "--nats",     "--token",
                                           "--user", "--password", "--ca-file"};
  return names;
}

std::string channel_kind(const Arguments& arguments) {
  return arguments.has("--nats") ? "nats" : "http";
}

std::unique_ptr<sideband::Channel> make_channel(const Arguments& arguments) {
  bool http = arguments.has("--http");
  bool nats = arguments.has("--nats");
  if (http == nats) throw UsageError("give exactly one of --http URL or --nats URL");
  if (http) {
    sideband::HttpChannelOptions options;
    options.url = arguments.get("--http");
    options.token = arguments.get("--token");
    options.user = arguments.get("--user");
    options.password = arguments.get("--password");
    options.ca_file = arguments.get("--ca-file");
    return std::make_unique<sideband::HttpChannel>(std::move(options));
  }
#if MEMWIRE_SERVICES_HAVE_NATS
  sideband::NatsOptions options;
  options.servers = {arguments.get("--nats")};
  options.token = arguments.get("--token");
  options.user = arguments.get("--user");
  options.password = arguments.get("--password");
  options.ca_file = arguments.get("--ca-file");
  return std::make_unique<sideband::NatsChannel>(std::move(options));
#else
  throw UsageError("this build has no NATS channel; use --http URL");
#endif
}

}  // namespace memwire::services
