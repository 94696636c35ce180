#pragma once

// What memwire-producer and memwire-consumer share: their command line and the worker they
// build from it.

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/arguments.hpp"
#include "memwire/connector.hpp"
#include "memwire/sideband/metrics_listener.hpp"
#include "memwire/sideband/worker.hpp"

namespace memwire::workers {

// What both stages take: the channel's options, --mode (its two values are each stage's own),
// --prefix, --requests, --dim, --timeout, --metrics-listen and --linger.
struct StageOptions {
  services::Arguments arguments;
  std::string mode;
  std::string prefix;
  std::uint64_t requests = 0;
  std::size_t dim = 0;
  std::chrono::steady_clock::time_point deadline;
  std::chrono::milliseconds linger{0};
};

// The options above, for --help after a stage's usage and --mode lines.
inline constexpr const char* kStageOptionsHelp =
    R"(  --prefix P                names are P.req-<id> (default emb)
  --requests N              request ids 0..N-1 (default 8)
  --dim D                   floats per embedding (default 1024)
  --timeout S               give up after S seconds (default 30)
  --metrics-listen ADDR:PORT  serve GET /metrics and /healthz there (default:
                            $MEMWIRE_METRICS_LISTEN; absent: none)
  --linger S                stay up S seconds after finishing, for a last scrape (default 0)
  auth: --token T, --user U --password P, --ca-file F
  --kv-replicas N           NATS: copies of the registry bucket if this creates it (default 0 =
                            one per server of the cluster, up to 3)
  --inbox-prefix P          NATS: where replies to this process come (default _INBOX_<user>,
                            or _INBOX without --user)
)";

// Runs a stage: parses its command line (after --help, printed with kStageOptionsHelp, returns
// 0), then returns `body`'s exit status. `modes`: --mode's values, the default first. Anything
// thrown is reported as services::report_failure does, as `program`'s (UsageError: status 2).
int run_stage(int argc, char** argv, std::string_view program, const char* help,
              const std::array<std::string, 2>& modes,
              const std::function<int(const StageOptions&)>& body);

// The connector (its options from the environment), its metrics listener, the channel the
// arguments name and the worker over them, in the order they must start.
struct StageWorker {
  explicit StageWorker(const services::Arguments& arguments);

  Connector connector;
  std::unique_ptr<sideband::MetricsListener> metrics;
  std::unique_ptr<sideband::Channel> channel;
  sideband::Worker worker;
  std::string via;  // the channel's kind, for the stage's lines
};

}  // namespace memwire::workers
