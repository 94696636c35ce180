// memwire: publish, fetch and list data by name from the shell.
#include <iostream>
#include <string_view>

#include "cli/commands.hpp"
#include "common/arguments.hpp"
#include "common/exit_codes.hpp"

namespace {

constexpr const char* kHelp = R"(usage: memwire COMMAND ... (--http URL | --nats URL) [auth]
  memwire serve NAME FILE [--count N] [--ttl-ms T] [--metadata-ttl-ms L]
      publish FILE's bytes under NAME until read N times (default 1; 0 = until SIGTERM).
      --ttl-ms: each publication ends after T ms (default: never). The metadata handed out is
      valid for L ms (default 600000, at least 100) and renewed before it expires.
      --metrics-listen ADDR:PORT (default $MEMWIRE_METRICS_LISTEN): serve the data plane's
      telemetry on GET /metrics and /healthz there.
  memwire get NAME OUT [--timeout S] [--wait] [--progress]
      read NAME into the file OUT (--wait: wait for NAME to be published). OUT must be a
      regular file or not exist; it is replaced whole once all bytes arrived. --timeout:
      seconds (default 30), from 0.001 to 31536000. --progress: draw progress on stderr
      even when it is not a terminal.
  memwire ls
      list the published names
auth: --token T | --token-file F (one line; empty files are refused), --user U --password P,
      --ca-file F (HTTPS / TLS)
nats: --kv-replicas N copies of the registry bucket when this creates it (1..5; default 0 =
      one per server of the cluster, up to 3); --inbox-prefix P where replies to this client
      come (default _INBOX_<user>, or _INBOX without --user)
exit status: 0 ok, 1 failure, 2 usage, 3 not found, 4 timeout
)";

}  // namespace

int main(int argc, char** argv) {
  using namespace memwire;
  if (argc < 2) {
    std::cerr << kHelp;
    return services::kUsage;
  }
  std::string_view command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    std::cout << kHelp;
    return services::kOk;
  }
  try {
    if (command == "serve") return cli::serve(argc, argv, 2);
    if (command == "get") return cli::get(argc, argv, 2);
    if (command == "ls") return cli::ls(argc, argv, 2);
    throw services::UsageError("unknown command '" + std::string(command) + "'");
  } catch (...) {
    return services::report_failure("memwire", std::current_exception());
  }
}
