// memwire-registry: the HTTP metadata endpoint as a standalone service.
#include <condition_variable>
#include <fstream>
#include <iostream>
#include <mutex>

#include "common/arguments.hpp"
#include "common/exit_codes.hpp"
#include "common/json_log.hpp"
#include "common/signals.hpp"
#include "memwire/sideband/http.hpp"

namespace {

constexpr const char* kHelp = R"(usage: memwire-registry [options]
  --listen ADDR:PORT     where to listen (default 127.0.0.1:8470; port 0 = any free port)
  --token TOKEN          bearer token clients must send (default: none)
  --token-file FILE      read the token from FILE (keeps it out of the process list)
  --ttl-sweep-ms N       how often expired names are dropped (default 1000)
  --state FILE           keep names in FILE so that a restart does not lose them
  --tls-cert FILE        serve HTTPS with this certificate chain (PEM) ...
  --tls-key FILE         ... and this private key
  --threads N            server threads; each long poll holds one (default 128)
  --quiet-requests       no log line per request
Prints its URL on stdout once listening; logs one JSON object per line on stderr.
Stops gracefully on SIGTERM or SIGINT.
)";

std::pair<std::string, std::uint16_t> split_listen(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos) throw memwire::services::UsageError("--listen needs ADDR:PORT");
  auto port = std::stoul(text.substr(colon + 1));
  if (port > 65535) throw memwire::services::UsageError("--listen: port out of range");
  return {text.substr(0, colon), static_cast<std::uint16_t>(port)};
}

std::string read_token(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw memwire::services::UsageError("cannot read --token-file " + file);
  std::string token;
  std::getline(in, token);
  return token;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace memwire;
  using namespace memwire::services;
  try {
    Arguments args(argc, argv, 1,
                   {"--listen", "--token", "--token-file", "--ttl-sweep-ms", "--state",
                    "--tls-cert", "--tls-key", "--threads"},
                   {"--help", "--quiet-requests"});
    if (args.has("--help")) {
      std::cout << kHelp;
      return kOk;
    }
    if (!args.positional().empty()) throw UsageError("unexpected argument " + args.positional()[0]);

    sideband::HttpEndpointOptions options;
    try {
      std::tie(options.bind_address, options.port) =
          split_listen(args.get("--listen", "127.0.0.1:8470"));
    } catch (const std::logic_error&) {
      throw UsageError("--listen needs ADDR:PORT");
    }
    options.token =
        args.has("--token-file") ? read_token(args.get("--token-file")) : args.get("--token");
    options.ttl_sweep_interval = std::chrono::milliseconds(args.get_uint("--ttl-sweep-ms", 1000));
    if (options.ttl_sweep_interval.count() == 0) throw UsageError("--ttl-sweep-ms must be > 0");
    options.state_file = args.get("--state");
    options.cert_file = args.get("--tls-cert");
    options.key_file = args.get("--tls-key");
    options.threads = args.get_uint("--threads", options.threads);
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
              {"auth", options.token.empty() ? "none" : "bearer"},
              {"tls", !options.cert_file.empty()},
              {"state_file", options.state_file},
              {"names", endpoint.size()}});
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
