// The test support's NatsServer: a start that fails says what the server printed, or, when it
// printed nothing, what its process is doing.
// A stand-in "nats-server" script on PATH plays the stuck server: the fault cannot be caused
// with the real one on demand.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

#include "support/nats_server.hpp"
#include "support/temp_dir.hpp"

using namespace memwire::test_support;
using namespace std::chrono_literals;

namespace {

// Long enough for a shell to start and print on a loaded machine.
constexpr auto kStartTime = 1000ms;

// Puts a "nats-server" running `script` first on PATH for the test's life; each start is counted.
class StandInServer {
 public:
  explicit StandInServer(const std::string& script) {
    const auto path = folder_.path() / "nats-server";
    std::ofstream(path) << "#!/bin/sh\necho started >> '" << starts_file() << "'\n"
                        << script << "\n";
    ::chmod(path.c_str(), 0755);
    const char* old = std::getenv("PATH");
    old_path_ = old ? old : "";
    ::setenv("PATH", (folder_.path().string() + ":" + old_path_).c_str(), 1);
  }
  ~StandInServer() { ::setenv("PATH", old_path_.c_str(), 1); }
  int starts() const {
    std::ifstream in(starts_file());
    int lines = 0;
    for (std::string line; std::getline(in, line);) ++lines;
    return lines;
  }

 private:
  std::string starts_file() const { return folder_.file("starts"); }
  TempDir folder_{"memwire-standin"};
  std::string old_path_;
};

std::string start_failure(std::chrono::milliseconds timeout) {
  NatsServerOptions options;
  options.start_timeout = timeout;
  try {
    NatsServer server(options);
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "";
}

}  // namespace

TEST(NatsServerStart, AServerThatPrintsNothingIsNamedWithWhatItIsDoing) {
  StandInServer silent("exec sleep 60");
  const auto failure = start_failure(kStartTime);
  EXPECT_NE(failure.find("printed nothing within 1000 ms (pid "), std::string::npos) << failure;
  EXPECT_NE(failure.find(", state "), std::string::npos) << failure;  // sh, or the sleep it became
  EXPECT_EQ(silent.starts(), 1);
}

TEST(NatsServerStart, AServerThatPrintsAtOnceButIsNeverReadyShowsWhatItPrinted) {
  // Printed before the support's waiting began, its output is still this start's.
  StandInServer talking("echo starting; exec sleep 60");
  const auto failure = start_failure(kStartTime);
  EXPECT_NE(failure.find("not ready within 1000 ms:\nstarting"), std::string::npos) << failure;
  EXPECT_EQ(talking.starts(), 1);
}
