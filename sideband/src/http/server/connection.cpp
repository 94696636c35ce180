#include "http/server/connection.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <openssl/err.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "http/server/request_rules.hpp"

namespace memwire::sideband::http {
namespace {

constexpr std::size_t kReadBuffer = 16u << 10;

thread_local bool rejecting_now = false;

int milliseconds_until(Clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
}

void address_of(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  auto* raw = reinterpret_cast<sockaddr*>(&address);
  if ((peer ? ::getpeername(fd, raw, &length) : ::getsockname(fd, raw, &length)) != 0) return;
  char host[NI_MAXHOST];
  char service[NI_MAXSERV];
  if (::getnameinfo(raw, length, host, sizeof host, service, sizeof service,
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host;
    port = std::atoi(service);
  }
}

}  // namespace

StopSignal::StopSignal() : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (fd_ < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
}
StopSignal::~StopSignal() { ::close(fd_); }
void StopSignal::raise() {
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(fd_, &one, sizeof one);  // never read: stays readable
}

ConnectionStream::ConnectionStream(int fd, SSL* ssl, const ConnectionLimits& limits,
                                   const StopSignal& stop)
    : fd_(fd),
      ssl_(ssl),
      limits_(limits),
      stop_(stop),
      request_deadline_(Clock::now() + limits.request_read_timeout),
      buffer_(kReadBuffer) {
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
}

ConnectionStream::Ready ConnectionStream::wait(short events, Clock::time_point deadline) const {
  for (;;) {
    pollfd fds[2] = {{fd_, events, 0}, {stop_.fd(), POLLIN, 0}};
    int n = ::poll(fds, 2, milliseconds_until(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Ready::Stopped;
    if (fds[1].revents != 0) return Ready::Stopped;
    if (fds[0].revents != 0) return Ready::Yes;  // also errors and hang-ups: the call says
    if (Clock::now() >= deadline) return Ready::Timeout;
  }
}

bool ConnectionStream::accept_tls() {
  for (;;) {
    ERR_clear_error();
    int result = SSL_accept(ssl_);
    if (result == 1) return true;
    int error = SSL_get_error(ssl_, result);
    short events = error == SSL_ERROR_WANT_READ    ? POLLIN
                   : error == SSL_ERROR_WANT_WRITE ? POLLOUT
                                                   : 0;
    if (events == 0 || wait(events, request_deadline_) != Ready::Yes) return false;
  }
}

bool ConnectionStream::wait_for_request() {
  bool ready = buffer_begin_ < buffer_end_ || (ssl_ != nullptr && SSL_pending(ssl_) > 0) ||
               wait(POLLIN, Clock::now() + limits_.keep_alive_timeout) == Ready::Yes;
  request_deadline_ = Clock::now() + limits_.request_read_timeout;
  response_deadline_.reset();
  return ready;
}

bool ConnectionStream::is_readable() const {
  return buffer_begin_ < buffer_end_ || (ssl_ != nullptr && SSL_pending(ssl_) > 0) ||
         wait(POLLIN, request_deadline_) == Ready::Yes;
}

Clock::time_point ConnectionStream::write_deadline() const {
  const auto deadline = Clock::now() + limits_.write_timeout;
  return response_deadline_ ? std::min(deadline, *response_deadline_) : deadline;
}

bool ConnectionStream::is_writable() const { return wait(POLLOUT, write_deadline()) == Ready::Yes; }

// Fills the buffer with what the socket has: > 0 bytes, 0 on close, -1 on error, timeout (the
// request deadline) or stop.
ssize_t ConnectionStream::receive_into_buffer() {
  for (;;) {
    ssize_t n;
    short events = POLLIN;
    if (ssl_ != nullptr) {
      ERR_clear_error();
      n = SSL_read(ssl_, buffer_.data(), static_cast<int>(buffer_.size()));
      if (n > 0) return n;
      int error = SSL_get_error(ssl_, static_cast<int>(n));
      if (error == SSL_ERROR_ZERO_RETURN) return 0;
      if (error == SSL_ERROR_WANT_WRITE) {
        events = POLLOUT;
      } else if (error != SSL_ERROR_WANT_READ) {
        return -1;
      }
    } else {
      n = ::recv(fd_, buffer_.data(), buffer_.size(), 0);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    }
    if (wait(events, request_deadline_) != Ready::Yes) return -1;
  }
}

ssize_t ConnectionStream::read(char* ptr, size_t size) {
  if (buffer_begin_ == buffer_end_) {
    auto n = receive_into_buffer();
    if (n <= 0) return n;
    buffer_begin_ = 0;
    buffer_end_ = static_cast<std::size_t>(n);
  }
  auto n = std::min(size, buffer_end_ - buffer_begin_);
  std::memcpy(ptr, buffer_.data() + buffer_begin_, n);
  buffer_begin_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t ConnectionStream::write(const char* ptr, size_t size) {
  if (!response_deadline_) response_deadline_ = Clock::now() + limits_.send_timeout;
  if (Clock::now() >= *response_deadline_) return -1;  // a slow reader: cut off
  const auto deadline = write_deadline();
  for (;;) {
    ssize_t n;
    short events = POLLOUT;
    if (ssl_ != nullptr) {
      ERR_clear_error();
      n = SSL_write(ssl_, ptr, static_cast<int>(std::min<size_t>(size, 1 << 30)));
      if (n > 0) return n;
      int error = SSL_get_error(ssl_, static_cast<int>(n));
      if (error == SSL_ERROR_WANT_READ) {
        events = POLLIN;
      } else if (error != SSL_ERROR_WANT_WRITE) {
        return -1;
      }
    } else {
      n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    }
    if (wait(events, deadline) != Ready::Yes) return -1;
  }
}

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  address_of(fd_, true, ip, port);
}

void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const {
  address_of(fd_, false, ip, port);
}

ConnectionPool::ConnectionPool(std::size_t initial, std::size_t max_threads,
                               std::chrono::milliseconds idle_timeout)
    : max_threads_(std::max<std::size_t>(max_threads, 1)), idle_timeout_(idle_timeout) {
  std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < std::min(initial, max_threads_); ++i) start_thread_locked();
}

ConnectionPool::~ConnectionPool() { shutdown(); }

bool ConnectionPool::rejecting() noexcept { return rejecting_now; }

void ConnectionPool::start_thread_locked() {
  std::thread thread([this] { run(); });
  auto id = thread.get_id();
  threads_.emplace(id, std::move(thread));
}

void ConnectionPool::enqueue(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    join_exited_locked();
    if (!stopping_ && busy_ < max_threads_) {
      ++busy_;
      jobs_.push_back(std::move(job));
      if (idle_ < jobs_.size()) start_thread_locked();
      work_.notify_one();
      return;
    }
  }
  // Every thread serves a connection: this one is answered and closed here, at once.
  rejecting_now = true;
  job();
  rejecting_now = false;
}

void ConnectionPool::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    ++idle_;
    bool woken =
        work_.wait_for(lock, idle_timeout_, [this] { return stopping_ || !jobs_.empty(); });
    --idle_;
    if (jobs_.empty() && (stopping_ || !woken)) break;  // stopped, or idle too long
    auto job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    job();
    job = nullptr;  // what it holds goes before the count says it is done
    lock.lock();
    --busy_;
  }
  exited_.push_back(std::this_thread::get_id());
}

void ConnectionPool::join_exited_locked() {
  for (auto id : exited_) {
    auto it = threads_.find(id);
    if (it == threads_.end()) continue;
    it->second.join();
    threads_.erase(it);
  }
  exited_.clear();
}

void ConnectionPool::shutdown() {
  std::map<std::thread::id, std::thread> threads;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    threads.swap(threads_);
    exited_.clear();
  }
  work_.notify_all();
  for (auto& [id, thread] : threads) thread.join();
}

std::size_t ConnectionPool::threads() {
  std::lock_guard lock(mutex_);
  return threads_.size();
}

namespace {

// Requests one kept-alive connection may carry before it closes.
constexpr std::size_t kKeepAliveMaxRequests = 100000;
// Unread bytes of a refused body are read and dropped for this long before the close, so that
// the client reads the answer instead of a reset.
constexpr auto kLingerOnClose = std::chrono::seconds(2);

// Over max_connections: a short 503 (plain HTTP only), then the close; on the accepting
// thread, so nothing here may block.
void refuse_connection(int fd, bool tls) {
  if (!tls) {
    static const std::string kBusy = [] {
      std::string body = R"({"error":"too many connections"})";
      return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
             "Retry-After: 1\r\nConnection: close\r\nContent-Length: " +
             std::to_string(body.size()) + "\r\n\r\n" + body;
    }();
    [[maybe_unused]] auto sent =
        ::send(fd, kBusy.data(), kBusy.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
}

// Half-closes, then reads and drops what the client still sends (the rest of a refused
// body) for a while: closing with unread bytes would reset the connection, and the client
// might never read the answer.
void drain_before_close(int fd, const StopSignal& stop_signal) {
  ::shutdown(fd, SHUT_WR);
  auto deadline = Clock::now() + kLingerOnClose;
  char scratch[16384];
  while (Clock::now() < deadline) {
    pollfd fds[2] = {{fd, POLLIN, 0}, {stop_signal.fd(), POLLIN, 0}};
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (::poll(fds, 2, static_cast<int>(std::max<long long>(left, 0))) <= 0) break;
    if (fds[1].revents != 0) break;
    auto n = ::recv(fd, scratch, sizeof scratch, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
  }
}

}  // namespace

// One accepted connection, on its own thread, until it closes, idles past the keep-alive
// timeout, is too slow to send a request, or the endpoint stops.
void serve_connection(int fd, const ProcessRequest& process, SSL_CTX* ssl_context,
                      const ConnectionLimits& limits, StopSignal& stop_signal) {
  if (ConnectionPool::rejecting()) return refuse_connection(fd, ssl_context != nullptr);
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(nullptr, SSL_free);
  if (ssl_context != nullptr) {
    ssl.reset(SSL_new(ssl_context));
    if (!ssl || SSL_set_fd(ssl.get(), fd) != 1) {
      ::close(fd);
      return;
    }
  }
  ConnectionStream stream(fd, ssl.get(), limits, stop_signal);
  bool linger = false;
  if (!ssl || stream.accept_tls()) {
    std::string ip;
    int port = -1;
    stream.get_remote_ip_and_port(ip, port);
    connection_remote = ip + ":" + std::to_string(port);
    for (auto left = kKeepAliveMaxRequests; left > 0; --left) {
      if (!stream.wait_for_request()) break;
      request_started = Clock::now();
      request_parsed = false;
      close_after_response = false;
      bool closed = false;
      bool ok = process(stream, left == 1, closed, ssl.get());
      linger = close_after_response;
      // Unparsed, the rest of the stream cannot be framed: a slow client's later header
      // lines would each be read as a new request.
      if (!ok || closed || close_after_response || !request_parsed) break;
    }
  }
  if (ssl) SSL_shutdown(ssl.get());  // one try: the socket is non-blocking
  if (linger) drain_before_close(fd, stop_signal);
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
}

}  // namespace memwire::sideband::http
