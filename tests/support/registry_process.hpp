#pragma once

// A memwire-registry on a free loopback port, for tests of the programs; its URL is its first
// line of output. Needs memwire::test::registry_program() from the test's build target.

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/built_programs.hpp"
#include "support/child_process.hpp"

namespace memwire::test_support {

class RegistryProcess {
 public:
  explicit RegistryProcess(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv{memwire::test::registry_program(),
                                  "--quiet-requests",
                                  "--listen",
                                  "127.0.0.1:0",
                                  "--ttl-sweep-ms",
                                  "50"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    process_ = std::make_unique<ChildProcess>(argv);
    auto line = process_->read_line(std::chrono::seconds(10));
    if (!line || !line->starts_with("http")) throw std::runtime_error("registry did not start");
    url_ = *line;
  }
  const std::string& url() const { return url_; }

 private:
  std::unique_ptr<ChildProcess> process_;
  std::string url_;
};

}  // namespace memwire::test_support
