// memwire: publish, fetch and list data by name from the shell.
#include <iostream>
#include <string_view>

#include "cli/commands.hpp"
#include "common/arguments.hpp"
#include "common/exit_codes.hpp"

namespace {

constexpr const char* kHelp = R"(usage: memwire COMMAND ... (--http URL | --nats URL) [auth]
  memwire serve NAME FILE [--count N] [--ttl-ms T]
      publish FILE's bytes under NAME until read N times (default 1; 0 = until SIGTERM)
  memwire get NAME OUT [--timeout S] [--wait]
      read NAME into the file OUT (--wait: wait for NAME to be published)
  memwire ls
      list the published names
auth: --token T, --user U --password P, --ca-file F (HTTPS / TLS)
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
