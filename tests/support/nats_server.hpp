#pragma once

// A real nats-server for tests: a loopback port of its own choosing, JetStream in a temporary store
// folder, optional token or user/password authentication. No mocks.

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/loopback.hpp"
#include "support/temp_dir.hpp"

namespace memwire::test_support {

struct NatsServerOptions {
  std::string token;  // set: clients must present this token
  std::string user;   // set (with password): clients must log in
  std::string password;
  std::string nkey;  // set: the only user is this NKey public key ("U..."), no password
  // TLS: both set = the server speaks only TLS with this certificate; url() is then "tls://".
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_ca_file;          // set: client certificates must chain to this CA ...
  bool tls_verify_clients = false;  // ... and when true, clients must present one
  // Configuration files copied into the server's folder and included (after the settings
  // above), e.g. deploy/nats/roles.conf; "NAME=value" entries added to its environment (for
  // the $VARIABLES such a file takes from there).
  std::vector<std::string> include_files;
  std::vector<std::string> environment;
  bool jetstream = true;
  std::size_t max_payload = 0;  // 0 = the server's default (1 MiB)
  std::chrono::milliseconds start_timeout = std::chrono::seconds(15);
  // Cluster membership (NatsCluster fills these): fixed ports instead of free ones, a unique
  // server name, the cluster's name and route listener, the other nodes' route ports.
  std::uint16_t port = 0;  // 0 = a loopback port the server chooses itself (no race for it)
  std::string server_name;
  std::string cluster_name;
  std::uint16_t cluster_port = 0;
  std::vector<std::uint16_t> route_ports;
  std::uint16_t monitor_port = 0;  // 0 = no monitoring endpoint
};

class NatsServer {
 public:
  // Starts the server and returns once it accepts connections. Throws std::runtime_error when
  // nats-server is not installed, exits early or is not ready in time (the test then fails:
  // CI installs nats-server, so its absence is a broken environment, not a reason to skip).
  explicit NatsServer(NatsServerOptions options = {});
  ~NatsServer();  // stops the server and removes its folder
  NatsServer(const NatsServer&) = delete;
  NatsServer& operator=(const NatsServer&) = delete;

  std::string url() const;  // "nats://127.0.0.1:PORT" ("tls://..." with TLS)
  std::uint16_t port() const noexcept { return port_; }
  const std::filesystem::path& store_dir() const noexcept { return store_dir_; }

  // SIGTERM (graceful) or SIGKILL (a crash); waits until the process is gone.
  void stop(bool graceful = true);
  // Starts again on the same port with the same store folder; waits until it accepts.
  void start();
  void restart() {
    stop();
    start();
  }
  bool running() const noexcept { return pid_ > 0; }
  std::string log() const;  // everything the server printed, for failure messages
  const std::string& name() const noexcept { return options_.server_name; }
  // GET http://127.0.0.1:<monitor_port><path>: the HTTP status and the body. Status 0 when the
  // endpoint does not answer (server down or no monitor port).
  std::pair<int, std::string> monitor(const std::string& path) const;

  // Path of the nats-server executable: PATH, then /usr/bin, /usr/sbin, /usr/local/bin.
  // Throws std::runtime_error when there is none.
  static std::string find_binary();

 private:
  void write_config() const;
  // Until the output from `from` on says the server is ready and it accepts a connection.
  void wait_until_ready(std::size_t from);
  void read_output(int fd);
  bool accepts_connections() const;

  NatsServerOptions options_;
  std::string binary_;
  TempDir dir_{"memwire-nats"};  // the config file and the JetStream store; removed last
  std::filesystem::path store_dir_;
  std::filesystem::path config_;
  std::uint16_t port_ = 0;
  pid_t pid_ = -1;

  mutable std::mutex mutex_;
  std::condition_variable output_;  // new output arrived, or the server closed its output
  std::string log_;
  bool output_closed_ = true;
  std::thread reader_;
};

// A real nats-server cluster on loopback: `nodes` servers with JetStream, full mesh of routes,
// each with a monitoring port. Returns once JetStream is healthy on every node (a meta leader is
// elected), so a client may create R3 buckets at once.
class NatsCluster {
 public:
  explicit NatsCluster(std::size_t nodes = 3, NatsServerOptions base = {});
  NatsServer& node(std::size_t index) { return *nodes_.at(index); }
  std::size_t size() const noexcept { return nodes_.size(); }
  // Every node's client URL, node 0 first.
  std::vector<std::string> urls() const;
  // Every node's client URL, node `first` first and then the others in order.
  std::vector<std::string> urls_starting_at(std::size_t first) const;
  // Index of the node called `server_name`; throws std::runtime_error for none.
  std::size_t index_of(const std::string& server_name) const;
  // Waits (bounded) until every running node answers /healthz with 200 and sees its routes to
  // the other running nodes. Throws std::runtime_error with the nodes' logs otherwise.
  void wait_until_healthy(std::chrono::milliseconds timeout = std::chrono::seconds(30));

 private:
  std::vector<std::unique_ptr<NatsServer>> nodes_;
};

// For a program that takes --nats URL: a private server when it was given none (`url` is then
// set to the server's), else no server.
inline std::unique_ptr<NatsServer> private_server_unless_given(std::string& url) {
  if (!url.empty()) return nullptr;
  auto server = std::make_unique<NatsServer>();
  url = server->url();
  return server;
}

}  // namespace memwire::test_support
