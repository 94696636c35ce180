#include "support/nats_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <vector>

extern char** environ;

namespace memwire::test_support {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("nats-server: " + what);
}

std::string errno_text(const char* call) { return std::string(call) + ": " + std::strerror(errno); }

// What `pid` is now: its executable and scheduler state ("R", "S", "D"...), for a failure.
std::string process_state(pid_t pid) {
  const auto proc = std::filesystem::path("/proc") / std::to_string(pid);
  std::error_code error;
  const auto exe = std::filesystem::read_symlink(proc / "exe", error);
  std::string stat;
  std::getline(std::ifstream(proc / "stat"), stat);
  const auto state_at = stat.rfind(") ");  // the name may hold spaces and parentheses
  const std::string state = state_at == std::string::npos ? "?" : stat.substr(state_at + 2, 1);
  return "pid " + std::to_string(pid) + ", executable " + (error ? "?" : exe.string()) +
         ", state " + state;
}

bool executable(const std::filesystem::path& path) {
  std::error_code error;
  return std::filesystem::is_regular_file(path, error) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

namespace {

// Config file strings are double-quoted; keep test-made secrets from breaking out.
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::string NatsServer::find_binary() {
  if (const char* path = std::getenv("PATH")) {
    std::stringstream entries(path);
    std::string entry;
    while (std::getline(entries, entry, ':')) {
      if (!entry.empty() && executable(std::filesystem::path(entry) / "nats-server")) {
        return (std::filesystem::path(entry) / "nats-server").string();
      }
    }
  }
  for (const char* candidate :
       {"/usr/bin/nats-server", "/usr/sbin/nats-server", "/usr/local/bin/nats-server"}) {
    if (executable(candidate)) return candidate;
  }
  fail(
      "not found on PATH, /usr/bin, /usr/sbin or /usr/local/bin (install the nats-server "
      "package)");
}

NatsServer::NatsServer(NatsServerOptions options)
    : options_(std::move(options)), binary_(find_binary()) {
  store_dir_ = dir_.path() / "store";
  config_ = dir_.path() / "server.conf";
  std::filesystem::create_directories(store_dir_);
  // Without a fixed port the server binds one of its own choosing and says which: a port picked
  // here, closed and handed over, was free only until someone else's bind(0) took it in the
  // meantime ("bind: address already in use", about 1 start in 2,000 with tests side by side:
  // the NatsChannelNkey.SeedFileAuthenticates flake).
  port_ = options_.port;
  if (options_.server_name.empty()) {
    static std::atomic<unsigned> started{0};
    options_.server_name =
        "memwire_test_" + std::to_string(::getpid()) + "_" + std::to_string(++started);
  }
  write_config();
  start();
  // Later starts (restart()) come back on the port the first one chose.
  if (options_.port == 0) write_config();
}

NatsServer::~NatsServer() {
  try {
    stop();
  } catch (...) {
  }
}

std::string NatsServer::url() const {
  return (options_.tls_cert_file.empty() ? "nats://127.0.0.1:" : "tls://127.0.0.1:") +
         std::to_string(port_);
}

std::string NatsServer::log() const {
  std::lock_guard lock(mutex_);
  return log_;
}

void NatsServer::write_config() const {
  std::ofstream config(config_);
  // -1: a port the server chooses (wait_until_ready reads it from its log).
  config << "listen: \"127.0.0.1:" << (port_ != 0 ? std::to_string(port_) : "-1") << "\"\n";
  config << "server_name: " << quoted(options_.server_name) << "\n";
  if (options_.monitor_port != 0) config << "http: \"127.0.0.1:" << options_.monitor_port << "\"\n";
  if (!options_.cluster_name.empty()) {
    config << "cluster {\n  name: " << quoted(options_.cluster_name)
           << "\n  listen: \"127.0.0.1:" << options_.cluster_port << "\"\n  routes: [";
    for (auto route : options_.route_ports)
      config << " \"nats-route://127.0.0.1:" << route << "\",";
    config << " ]\n}\n";
  }
  if (options_.jetstream) config << "jetstream { store_dir: " << quoted(store_dir_) << " }\n";
  if (options_.max_payload > 0) config << "max_payload: " << options_.max_payload << "\n";
  if (!options_.tls_cert_file.empty()) {
    config << "tls { cert_file: " << quoted(options_.tls_cert_file)
           << ", key_file: " << quoted(options_.tls_key_file);
    if (!options_.tls_ca_file.empty()) config << ", ca_file: " << quoted(options_.tls_ca_file);
    if (options_.tls_verify_clients) config << ", verify: true";
    config << " }\n";
  }
  if (!options_.nkey.empty()) {
    config << "authorization { users: [ { nkey: " << quoted(options_.nkey) << " } ] }\n";
  } else if (!options_.token.empty()) {
    config << "authorization { token: " << quoted(options_.token) << " }\n";
  } else if (!options_.user.empty()) {
    config << "authorization { user: " << quoted(options_.user)
           << ", password: " << quoted(options_.password) << " }\n";
  }
  for (const auto& file : options_.include_files) {
    const auto copy = dir_.path() / std::filesystem::path(file).filename();
    std::filesystem::copy_file(file, copy, std::filesystem::copy_options::overwrite_existing);
    // nats-server resolves an include relative to the including file.
    config << "include " << quoted(copy.filename().string()) << "\n";
  }
  if (!config) fail("cannot write " + config_.string());
}

void NatsServer::start() {
  if (running()) return;
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) fail(errno_text("pipe2"));

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  std::string config = config_.string();
  std::vector<char*> argv = {binary_.data(), const_cast<char*>("-c"), config.data(), nullptr};
  pid_t pid = -1;
  std::vector<std::string> extra = options_.environment;
  std::vector<char*> environment;
  for (char** variable = environ; *variable != nullptr; ++variable)
    environment.push_back(*variable);
  for (auto& variable : extra) environment.push_back(variable.data());
  environment.push_back(nullptr);
  int error =
      ::posix_spawn(&pid, binary_.c_str(), &actions, nullptr, argv.data(), environment.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (error != 0) {
    ::close(pipe_fds[0]);
    fail("cannot start " + binary_ + ": " + std::strerror(error));
  }
  pid_ = pid;
  std::size_t output_from = 0;
  {
    std::lock_guard lock(mutex_);
    output_closed_ = false;
    log_ += "--- started " + binary_ + " -c " + config + "\n";
    // Where this start's output begins, taken before anything of it can be read: taken later,
    // a start-up printed whole meanwhile (a busy machine, a sanitizer's slow thread start) was
    // never looked at, and the wait ran out with "Server is ready" already in the log.
    output_from = log_.size();
  }
  reader_ = std::thread([this, fd = pipe_fds[0]] { read_output(fd); });
  try {
    wait_until_ready(output_from);
  } catch (...) {
    stop(false);
    throw;
  }
}

void NatsServer::read_output(int fd) {
  char buffer[4096];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    std::lock_guard lock(mutex_);
    if (n <= 0) {
      output_closed_ = true;  // the server exited (it holds the only write end)
      output_.notify_all();
      break;
    }
    log_.append(buffer, static_cast<std::size_t>(n));
    output_.notify_all();
  }
  ::close(fd);
}

bool NatsServer::accepts_connections() const {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port_);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Loopback connects complete or fail at once: no waiting here.
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  ::close(fd);
  return ok;
}

void NatsServer::wait_until_ready(std::size_t from) {
  const auto deadline = std::chrono::steady_clock::now() + options_.start_timeout;
  std::unique_lock lock(mutex_);
  for (;;) {
    // "Server is ready" comes after JetStream has restored its streams and the client listener
    // is up; the connect proves it.
    const bool ready = log_.find("Server is ready", from) != std::string::npos;
    if (ready && port_ == 0) {
      constexpr std::string_view kListening = "Listening for client connections on 127.0.0.1:";
      const auto at = log_.find(kListening, from);
      if (at != std::string::npos)
        port_ = static_cast<std::uint16_t>(std::atoi(log_.c_str() + at + kListening.size()));
      if (port_ == 0) fail("ready, but it did not say its client port:\n" + log_.substr(from));
    }
    if (ready) {
      lock.unlock();
      if (accepts_connections()) return;
      lock.lock();
    }
    if (output_closed_) {
      fail("exited during start-up on port " + std::to_string(port_) + ":\n" + log_.substr(from));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      const std::string limit = std::to_string(options_.start_timeout.count()) + " ms";
      if (log_.size() == from)
        fail("printed nothing within " + limit + " (" + process_state(pid_) + ")");
      fail("not ready within " + limit + ":\n" + log_.substr(from));
    }
    // Woken by the server's next line of output (or its exit); the bound only matters if the
    // log line was missed and we are retrying the connect.
    output_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() +
                                                    std::chrono::milliseconds(ready ? 10 : 1000)));
  }
}

void NatsServer::stop(bool graceful) {
  if (!running()) return;
  ::kill(pid_, graceful ? SIGTERM : SIGKILL);
  {
    std::unique_lock lock(mutex_);
    if (!output_.wait_for(lock, std::chrono::seconds(20), [&] { return output_closed_; })) {
      ::kill(pid_, SIGKILL);
    }
  }
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  if (reader_.joinable()) reader_.join();
}

}  // namespace memwire::test_support

namespace memwire::test_support {

std::pair<int, std::string> NatsServer::monitor(const std::string& path) const {
  if (!running() || options_.monitor_port == 0) return {0, {}};
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {0, {}};
  // A stalled server must not stall the test: both directions give up after 2 s.
  timeval limit{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(options_.monitor_port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
    const std::string request =
        "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
        static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      for (;;) {
        ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0 || response.size() > (std::size_t{1} << 22)) break;
        response.append(buffer, static_cast<std::size_t>(n));
      }
    }
  }
  ::close(fd);
  // "HTTP/1.x NNN ...\r\n...\r\n\r\nbody"
  if (response.size() < 12 || !response.starts_with("HTTP/")) return {0, {}};
  int status = std::atoi(response.c_str() + response.find(' ') + 1);
  auto body = response.find("\r\n\r\n");
  return {status, body == std::string::npos ? std::string() : response.substr(body + 4)};
}

NatsCluster::NatsCluster(std::size_t nodes, NatsServerOptions base) {
  std::vector<std::uint16_t> client_ports, cluster_ports, monitor_ports;
  for (std::size_t i = 0; i < nodes; ++i) {
    client_ports.push_back(free_loopback_port());
    cluster_ports.push_back(free_loopback_port());
    monitor_ports.push_back(free_loopback_port());
  }
  const std::string cluster_name = "memwire_test_cluster_" + std::to_string(client_ports[0]);
  for (std::size_t i = 0; i < nodes; ++i) {
    auto options = base;
    options.port = client_ports[i];
    options.server_name = "n" + std::to_string(i) + "_" + std::to_string(client_ports[i]);
    options.cluster_name = cluster_name;
    options.cluster_port = cluster_ports[i];
    options.monitor_port = monitor_ports[i];
    options.route_ports.clear();
    for (std::size_t j = 0; j < nodes; ++j) {
      if (j != i) options.route_ports.push_back(cluster_ports[j]);
    }
    nodes_.push_back(std::make_unique<NatsServer>(std::move(options)));
  }
  wait_until_healthy();
}

std::vector<std::string> NatsCluster::urls() const { return urls_starting_at(0); }

std::vector<std::string> NatsCluster::urls_starting_at(std::size_t first) const {
  std::vector<std::string> urls;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    urls.push_back(nodes_[(first + i) % nodes_.size()]->url());
  }
  return urls;
}

std::size_t NatsCluster::index_of(const std::string& server_name) const {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i]->name() == server_name) return i;
  }
  fail("no node called '" + server_name + "' in the cluster");
}

void NatsCluster::wait_until_healthy(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::size_t running = 0;
  for (const auto& node : nodes_) running += node->running() ? 1 : 0;
  for (int round = 0;; ++round) {
    bool healthy = true;
    for (const auto& node : nodes_) {
      if (!node->running()) continue;
      auto [status, body] = node->monitor("/healthz");
      auto [routes_status, routes] = node->monitor("/routez");
      // /routez lists "num_routes": N; every other running node must be routed to.
      const std::string want = "\"num_routes\": " + std::to_string(running - 1);
      healthy = healthy && status == 200 && routes_status == 200 &&
                routes.find(want) != std::string::npos;
    }
    if (healthy) return;
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string logs;
      for (const auto& node : nodes_) logs += "--- " + node->name() + ":\n" + node->log();
      fail("cluster not healthy within " + std::to_string(timeout.count()) + " ms:\n" + logs);
    }
    // The monitoring endpoint has no push: look again shortly (bounded by the deadline).
    std::this_thread::sleep_for(std::chrono::milliseconds(round < 20 ? 50 : 200));
  }
}

}  // namespace memwire::test_support
