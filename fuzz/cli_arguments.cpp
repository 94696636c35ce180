// Command lines of the memwire programs (the CLI, the registry, the workers): words are
// whatever a script passes. Parsing and every typed getter must give a value or throw
// UsageError (exit status 2), never crash or throw anything else. Input: argv words separated
// by NUL bytes.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <set>
#include <string>
#include <vector>

#include "common/arguments.hpp"
#include "common/channel_options.hpp"
#include "memwire/error.hpp"

using memwire::services::Arguments;
using memwire::services::UsageError;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> words{"memwire"};
  std::string word;
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      words.push_back(std::move(word));
      word.clear();
    } else {
      word += static_cast<char>(data[i]);
    }
  }
  words.push_back(std::move(word));
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);

  // The options of every program together: `memwire serve|get|ls`, the registry, the workers.
  auto valued = memwire::services::channel_option_names();
  valued.insert({"--count", "--ttl-ms", "--timeout", "--mode", "--prefix", "--requests", "--dim"});
  const std::set<std::string> switches{"--wait", "--help"};
  try {
    Arguments args(static_cast<int>(words.size()), argv.data(), 1, valued, switches);
    for (const auto& option : valued) {
      (void)args.get(option);
      try {
        (void)args.get_uint(option, 1);
      } catch (const UsageError&) {
      }
      try {
        (void)args.get_seconds(option, std::chrono::seconds(1));
      } catch (const UsageError&) {
      }
      try {
        (void)args.get_milliseconds(option, std::chrono::milliseconds(1),
                                    std::chrono::milliseconds(1));
      } catch (const UsageError&) {
      }
    }
    // The HTTP channel is built without contacting anyone (NATS would connect: left out).
    if (!args.has("--nats")) (void)memwire::services::make_channel(args);
  } catch (const UsageError&) {
  } catch (const memwire::Error&) {
    // make_channel: a URL the channel refuses
  }
  return 0;
}
