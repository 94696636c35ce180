#include <iostream>

#include "cli/commands.hpp"
#include "common/channel_options.hpp"

namespace memwire::cli {

int ls(int argc, char** argv, int first) {
  services::Arguments args(argc, argv, first, services::channel_option_names());
  if (!args.positional().empty()) {
    throw services::UsageError("ls takes no arguments, got '" + args.positional()[0] + "'");
  }
  auto channel = services::make_channel(args);
  for (const auto& name : channel->list()) std::cout << name << "\n";
  return 0;
}

}  // namespace memwire::cli
