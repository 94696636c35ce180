#include "workers/stage.hpp"

#include <iostream>
#include <utility>

#include "common/channel_options.hpp"
#include "common/exit_codes.hpp"
#include "common/telemetry.hpp"

namespace memwire::workers {

namespace {

// nullopt once --help printed `help`.
std::optional<StageOptions> parse_stage_options(int argc, char** argv, const char* help,
                                                const std::array<std::string, 2>& modes) {
  auto valued = services::channel_option_names();
  valued.insert({"--mode", "--prefix", "--requests", "--dim", "--timeout", services::kMetricsListen,
                 services::kLinger});
  services::Arguments args(argc, argv, 1, valued, {"--help"});
  if (args.has("--help")) {
    std::cout << help << kStageOptionsHelp;
    return std::nullopt;
  }
  if (!args.positional().empty()) {
    throw services::UsageError("unexpected argument " + args.positional()[0]);
  }
  auto mode = args.get("--mode", modes[0]);
  if (mode != modes[0] && mode != modes[1]) {
    throw services::UsageError("--mode is " + modes[0] + " or " + modes[1]);
  }
  auto prefix = args.get("--prefix", "emb");
  sideband::validate_name(prefix);
  const auto requests = args.get_uint("--requests", 8);
  const auto dim = static_cast<std::size_t>(args.get_uint("--dim", 1024));
  if (requests == 0 || dim == 0) throw services::UsageError("--requests and --dim must be > 0");
  const auto deadline =
      std::chrono::steady_clock::now() + args.get_seconds("--timeout", std::chrono::seconds(30));
  const auto linger = services::linger_of(args);
  return StageOptions{args, std::move(mode), std::move(prefix), requests, dim, deadline, linger};
}

}  // namespace

int run_stage(int argc, char** argv, std::string_view program, const char* help,
              const std::array<std::string, 2>& modes,
              const std::function<int(const StageOptions&)>& body) {
  try {
    auto options = parse_stage_options(argc, argv, help, modes);
    return options ? body(*options) : 0;
  } catch (...) {
    return services::report_failure(program, std::current_exception());
  }
}

StageWorker::StageWorker(const services::Arguments& arguments)
    : connector(services::connector_options_from_environment()),
      metrics(services::start_metrics_listener(arguments, connector)),
      channel(services::make_channel(arguments)),
      worker(connector, *channel),
      via(services::channel_kind(arguments)) {}

}  // namespace memwire::workers
