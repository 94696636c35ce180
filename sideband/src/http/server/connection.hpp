#pragma once

#include <httplib.h>
#include <openssl/ssl.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace memwire::sideband::http {

using Clock = std::chrono::steady_clock;

// Raised once when the endpoint stops: every connection waiting to read or write wakes at once
// (an eventfd that each poll() includes), so that stop never waits for a client.
class StopSignal {
 public:
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;
  void raise();
  int fd() const noexcept { return fd_; }

 private:
  int fd_ = -1;
};

struct ConnectionLimits {
  std::chrono::milliseconds keep_alive_timeout{5000};
  std::chrono::milliseconds request_read_timeout{10000};
  std::chrono::milliseconds write_timeout{5000};
  // A response's bytes must all be written within this time of its first write.
  std::chrono::milliseconds send_timeout{30000};
};

// One accepted connection as httplib's request parser sees it, replacing httplib's own: the
// socket is non-blocking and every wait is a poll() bounded by
//  - the request deadline: a request's headers and body must arrive within
//    request_read_timeout of its first byte (httplib only bounds each read, and a byte every
//    few seconds, slowloris, held a thread for ever);
//  - the write timeout for each write, and the send timeout for all of a response's (a reader
//    that takes a byte now and then held a thread and its answer for ever);
//  - the endpoint's stop signal.
// With `ssl` set it speaks TLS over the socket (the handshake is done by accept_tls()).
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(int fd, SSL* ssl, const ConnectionLimits& limits, const StopSignal& stop);

  // TLS handshake within request_read_timeout; false when it fails or takes longer.
  bool accept_tls();
  // Waits up to keep_alive_timeout for the next request's first byte and starts its deadline;
  // false on timeout, close or stop.
  bool wait_for_request();

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return fd_; }

 private:
  enum class Ready { Yes, Timeout, Stopped };
  Ready wait(short events, Clock::time_point deadline) const;
  ssize_t receive_into_buffer();

  int fd_;
  SSL* ssl_;
  ConnectionLimits limits_;
  const StopSignal& stop_;
  Clock::time_point request_deadline_;
  // When the response being written must be out; unset until its first write.
  std::optional<Clock::time_point> response_deadline_;
  // The deadline of a write starting now: the write timeout, or the response's end if sooner.
  Clock::time_point write_deadline() const;
  std::vector<char> buffer_;
  std::size_t buffer_begin_ = 0;
  std::size_t buffer_end_ = 0;
};

// The server's threads: one per open connection, started on demand up to `max_threads`
// (`initial` up front); a thread idle for a while ends. A connection that finds all of them
// busy is handed to `reject` on the accepting thread (it answers 503 and closes at once).
class ConnectionPool final : public httplib::TaskQueue {
 public:
  ConnectionPool(std::size_t initial, std::size_t max_threads,
                 std::chrono::milliseconds idle_timeout);
  ~ConnectionPool() override;

  void enqueue(std::function<void()> job) override;
  void shutdown() override;  // runs what is queued, then joins every thread
  std::size_t threads();
  // True on the accepting thread while a job runs as a rejected one.
  static bool rejecting() noexcept;

 private:
  void start_thread_locked();
  void run();
  void join_exited_locked();

  const std::size_t max_threads_;
  const std::chrono::milliseconds idle_timeout_;
  std::mutex mutex_;
  std::condition_variable work_;
  std::deque<std::function<void()>> jobs_;
  std::map<std::thread::id, std::thread> threads_;
  std::vector<std::thread::id> exited_;
  std::size_t busy_ = 0;  // jobs queued or running
  std::size_t idle_ = 0;
  bool stopping_ = false;
};

// What a connection's thread runs for each request: httplib's parser and router.
using ProcessRequest =
    std::function<bool(httplib::Stream&, bool close_connection, bool& connection_closed, SSL* ssl)>;

// One accepted connection, on its own thread, until it closes, idles past the keep-alive
// timeout, is too slow to send a request, or the endpoint stops (`stop_signal`). Over the
// connection limit (ConnectionPool::rejecting()) it is refused at once. `ssl_context`: HTTPS.
void serve_connection(int fd, const ProcessRequest& process, SSL_CTX* ssl_context,
                      const ConnectionLimits& limits, StopSignal& stop_signal);

}  // namespace memwire::sideband::http
