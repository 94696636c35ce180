// memwire-registry: the HTTP metadata endpoint as a standalone service.
#include <chrono>
#include <condition_variable>
#include <iostream>
#include <mutex>

#include "common/arguments.hpp"
#include "common/exit_codes.hpp"
#include "common/json_log.hpp"
#include "common/signals.hpp"
#include "common/token_file.hpp"
#include "memwire/error.hpp"
#include "memwire/sideband/http.hpp"

namespace {

constexpr const char* kHelp = R"(usage: memwire-registry [options]
  --listen ADDR:PORT     where to listen (default 127.0.0.1:8470; port 0 = any free port)
  --token TOKEN          bearer token clients must send (default: none)
  --token-file FILE      read the token from FILE (keeps it out of the process list)
  --grants FILE          tokens scoped to a role and a name prefix, one per line:
                         TOKEN read|publish PREFIX   (PREFIX a name, or * for all names);
                         read: fetch, list, wait, request; publish: also publish, withdraw
                         and serve names under PREFIX. With --token, both are accepted.
  --ttl-sweep-ms N       how often expired names are dropped (default 1000)
  --state FILE           keep names in FILE so that a restart does not lose them
  --tls-cert FILE        serve HTTPS with this certificate chain (PEM) ...
  --tls-key FILE         ... and this private key
  --threads N            server threads started up front; more start on demand, one per
                         open connection (default 8)
  --max-connections N    connections served at once; one more gets 503 (default 1024)
  --max-long-polls N     requests waiting at once (long polls, request/reply); one more
                         gets 503; below --max-connections (default 512)
  --max-body-bytes N     largest request body, however framed; more gets 413 (default 16 MiB)
  --max-waiting-bytes N  bytes of bodies waiting requests hold at once; one more gets 503
                         (default 64 MiB)
  --max-sending-bytes N  bytes of bodies answers being sent hold at once (a document read by
                         many counts once); one more gets 503; at least --max-body-bytes
                         (default 64 MiB)
  --send-timeout-ms N    an answer must be sent whole within N ms of its first byte; a slower
                         reader is cut off (default 30000)
  --request-read-ms N    a request's headers and body must arrive within N ms (default 10000)
  --max-names-per-grant N  names (operations and pools) one token may hold; one more is
                         answered 403 with "limit" and "flag" (default 1024; 0 = no limit).
                         Each grant's token, --token, and without either all callers together
  --max-bytes-per-grant N  bytes one token may hold (names plus documents); a PUT past it
                         gets 403; replacing a name counts its new size (default 64 MiB; 0 = none)
  --quiet-requests       no log line per request
Prints its URL on stdout once listening; logs one JSON object per line on stderr.
Stops gracefully on SIGTERM or SIGINT.
)";

// A duration flag in milliseconds: 1 ms to a day (more would overflow deadlines).
std::chrono::milliseconds milliseconds_option(const memwire::services::Arguments& args,
                                              const std::string& flag, std::uint64_t fallback) {
  constexpr std::uint64_t kDayMs = 24ULL * 3600 * 1000;
  auto value = args.get_uint(flag, fallback);
  if (value == 0 || value > kDayMs) {
    throw memwire::services::UsageError(flag + " must be between 1 and " + std::to_string(kDayMs));
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(value));
}

}  // namespace

int main(int argc, char** argv) {
  using namespace memwire;
  using namespace memwire::services;
  try {
    Arguments args(
        argc, argv, 1,
        {"--listen", "--token", "--token-file", "--grants", "--ttl-sweep-ms", "--state",
         "--tls-cert", "--tls-key", "--threads", "--max-connections", "--max-long-polls",
         "--max-body-bytes", "--max-waiting-bytes", "--max-sending-bytes", "--send-timeout-ms",
         "--request-read-ms", "--max-names-per-grant", "--max-bytes-per-grant"},
        {"--help", "--quiet-requests"});
    if (args.has("--help")) {
      std::cout << kHelp;
      return kOk;
    }
    if (!args.positional().empty()) throw UsageError("unexpected argument " + args.positional()[0]);

    sideband::HttpEndpointOptions options;
    const auto listen = parse_listen_address(args.get("--listen", "127.0.0.1:8470"), "--listen");
    options.bind_address = listen.host;
    options.port = listen.port;
    if (args.has("--token-file") && args.has("--token")) {
      throw UsageError("--token and --token-file exclude each other");
    }
    options.token = args.has("--token-file")
                        ? memwire::services::read_token_file(args.get("--token-file"))
                        : args.get("--token");
    if (args.has("--token") && options.token.empty()) throw UsageError("--token is empty");
    if (args.has("--grants")) {
      try {
        options.grants = sideband::load_http_grants(args.get("--grants"));
      } catch (const Error& error) {
        throw UsageError("--grants: " + std::string(error.message()));
      }
      if (options.grants.empty()) throw UsageError("--grants: the file grants no token");
    }
    options.ttl_sweep_interval = milliseconds_option(args, "--ttl-sweep-ms", 1000);

    options.state_file = args.get("--state");
    options.cert_file = args.get("--tls-cert");
    options.key_file = args.get("--tls-key");
    options.threads = args.get_uint("--threads", options.threads);
    options.max_connections = args.get_uint("--max-connections", options.max_connections);
    options.max_long_polls = args.get_uint("--max-long-polls", options.max_long_polls);
    options.max_body_size = args.get_uint("--max-body-bytes", options.max_body_size);
    options.max_waiting_bytes = args.get_uint("--max-waiting-bytes", options.max_waiting_bytes);
    options.max_sending_bytes = args.get_uint("--max-sending-bytes", options.max_sending_bytes);
    options.send_timeout = milliseconds_option(
        args, "--send-timeout-ms", static_cast<std::uint64_t>(options.send_timeout.count()));
    options.request_read_timeout =
        milliseconds_option(args, "--request-read-ms",
                            static_cast<std::uint64_t>(options.request_read_timeout.count()));
    options.max_names_per_grant =
        args.get_uint("--max-names-per-grant", options.max_names_per_grant);
    options.max_bytes_per_grant =
        args.get_uint("--max-bytes-per-grant", options.max_bytes_per_grant);
    if (options.max_connections == 0 || options.max_long_polls == 0 || options.max_body_size == 0 ||
        options.max_waiting_bytes == 0) {
      throw UsageError(
          "--max-connections, --max-long-polls, --max-body-bytes and --max-waiting-bytes must be "
          "> 0");
    }
    if (options.max_long_polls >= options.max_connections) {
      throw UsageError("--max-long-polls must be below --max-connections");
    }
    if (options.max_sending_bytes < options.max_body_size) {
      throw UsageError("--max-sending-bytes must be at least --max-body-bytes");
    }
    if (!args.has("--quiet-requests")) {
      options.access_log = [](const sideband::HttpAccessRecord& r) {
        log_json("info", "request",
                 {{"method", r.method},
                  {"path", r.path},
                  {"status", r.status},
                  {"duration_us", r.duration.count()},
                  {"remote", r.remote}});
      };
    }

    std::mutex mutex;
    std::condition_variable stop_requested;
    int signal_seen = 0;
    // Before any thread starts, so that every thread inherits the blocked signals.
    SignalWatcher watcher([&](int signal) {
      std::lock_guard lock(mutex);
      signal_seen = signal;
      stop_requested.notify_all();
    });

    sideband::HttpEndpoint endpoint(options);
    endpoint.start();
    log_json("info", "listening",
             {{"url", endpoint.url()},
              {"auth", options.token.empty() && options.grants.empty() ? "none" : "bearer"},
              {"grants", options.grants.size()},
              {"tls", !options.cert_file.empty()},
              {"state_file", options.state_file},
              {"max_names_per_grant", options.max_names_per_grant},
              {"max_bytes_per_grant", options.max_bytes_per_grant},
              // A large state file loads in the background: /readyz says when it is done.
              {"state_loading", !endpoint.ready()}});
    std::cout << endpoint.url() << std::endl;

    {
      std::unique_lock lock(mutex);
      stop_requested.wait(lock, [&] { return signal_seen != 0; });
    }
    log_json("info", "stopping", {{"signal", signal_seen}});
    endpoint.stop();
    log_json("info", "stopped");
    return kOk;
  } catch (...) {
    // Like every other line of the service: one JSON object.
    auto failure = describe_failure("memwire-registry", std::current_exception());
    log_json("error", failure.message, {{"exit_status", failure.status}});
    return failure.status;
  }
}
