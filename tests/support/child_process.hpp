#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace memwire::test_support {

// Another OS process with its stdin and stdout on pipes: the peer in multi-process tests.
class ChildProcess {
 public:
  // `environment`: extra NAME=value entries on top of ours.
  explicit ChildProcess(const std::vector<std::string>& argv,
                        const std::vector<std::string>& environment = {});
  ~ChildProcess();  // kills it if still running
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  void write_line(const std::string& line);
  // One line of its stdout, without the newline; nullopt on EOF or after `timeout`.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout);
  void kill(int signal);
  // Its exit code, or 128 + signal; nullopt if it did not end within `timeout`.
  std::optional<int> wait(std::chrono::milliseconds timeout);
  int pid() const { return pid_; }

 private:
  int pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  std::string buffered_;
  std::optional<int> exit_code_;
};

}  // namespace memwire::test_support
