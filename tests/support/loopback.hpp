#pragma once

#include <cstdint>
#include <string>

namespace memwire::test_support {

// A loopback TCP port that nobody listens on: bound, then released. It lies below the kernel's
// ephemeral range, so no bind(0) or connect() of another process takes it before it is used;
// only an explicit bind could (a server started on it then fails, and says so).
std::uint16_t free_loopback_port();
// The kernel's range for ports it picks itself (bind to 0, connect), inclusive.
struct EphemeralPorts {
  unsigned first = 32768;
  unsigned last = 60999;
};
EphemeralPorts ephemeral_ports();

// A loopback TCP port that accepts connections (the kernel completes the handshake) and never
// answers: what a hung server looks like to a client.
class SilentListener {
 public:
  SilentListener();
  ~SilentListener();
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;
  std::uint16_t port() const noexcept { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
};

}  // namespace memwire::test_support
