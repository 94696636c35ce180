#include "support/child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

extern char** environ;

namespace memwire::test_support {

ChildProcess::ChildProcess(const std::vector<std::string>& argv,
                           const std::vector<std::string>& environment) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  std::vector<char*> args;
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  std::vector<char*> variables;
  for (char** variable = environ; *variable != nullptr; ++variable) variables.push_back(*variable);
  for (const auto& variable : environment) variables.push_back(const_cast<char*>(variable.c_str()));
  variables.push_back(nullptr);
  int error = posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), variables.data());
  posix_spawn_file_actions_destroy(&actions);
  close(in[0]);
  close(out[1]);
  stdin_fd_ = in[1];
  stdout_fd_ = out[0];
  if (error != 0) throw std::runtime_error("cannot start " + argv[0]);
}

ChildProcess::~ChildProcess() {
  if (!exit_code_) {
    ::kill(pid_, SIGKILL);
    wait(std::chrono::seconds(10));
  }
  close(stdin_fd_);
  close(stdout_fd_);
}

void ChildProcess::write_line(const std::string& line) {
  std::string data = line + "\n";
  const char* cursor = data.data();
  std::size_t left = data.size();
  while (left > 0) {
    ssize_t n = ::write(stdin_fd_, cursor, left);
    if (n <= 0) throw std::runtime_error("child's stdin closed");
    cursor += n;
    left -= static_cast<std::size_t>(n);
  }
}

std::optional<std::string> ChildProcess::read_line(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto newline = buffered_.find('\n'); newline != std::string::npos) {
      auto line = buffered_.substr(0, newline);
      buffered_.erase(0, newline + 1);
      return line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd readable{stdout_fd_, POLLIN, 0};
    if (::poll(&readable, 1, static_cast<int>(left.count())) <= 0) continue;
    char chunk[65536];
    ssize_t n = ::read(stdout_fd_, chunk, sizeof chunk);
    if (n <= 0) return std::nullopt;
    buffered_.append(chunk, static_cast<std::size_t>(n));
  }
}

void ChildProcess::kill(int signal) {
  ::kill(pid_, signal);
  if (signal != SIGSTOP) return;
  // kill() returns before the child has stopped; tests stop it so that it answers nothing
  // from now on, so wait (a little) until the kernel reports it stopped.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream stat("/proc/" + std::to_string(pid_) + "/stat");
    std::string line;
    std::getline(stat, line);
    const auto state = line.rfind(") ");  // the state follows the command's closing parenthesis
    if (state == std::string::npos || line[state + 2] == 'T') return;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

std::optional<int> ChildProcess::wait(std::chrono::milliseconds timeout) {
  if (exit_code_) return exit_code_;
  // A pidfd becomes readable when the process ends: poll it with the deadline.
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
  if (pidfd >= 0) {
    pollfd ended{pidfd, POLLIN, 0};
    int ready = ::poll(&ended, 1, static_cast<int>(timeout.count()));
    ::close(pidfd);
    if (ready == 0) return std::nullopt;
  }
  int status = 0;
  if (::waitpid(pid_, &status, 0) != pid_) return std::nullopt;
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return exit_code_;
}

}  // namespace memwire::test_support
