#pragma once

#include <httplib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>

#include "http/server/connection.hpp"

namespace memwire::sideband::http {

constexpr int kListenBacklog = 1024;  // httplib's compiled-in 5 drops bursts of connects

// httplib keeps the listening socket to itself; this reaches it to widen the backlog and to
// close it whether or not listen() has started yet (Server::stop() only acts once running).
// It also takes over each accepted connection (see http/server/connection.hpp): `serve_connection`
// runs on the connection's thread and calls process() for each request.
template <class Base>
class OwnedServer : public Base {
 public:
  using Base::Base;
  void widen_backlog() { ::listen(this->svr_sock_, kListenBacklog); }
  void close_listener() {
    auto sock = this->svr_sock_.exchange(INVALID_SOCKET);
    if (sock != INVALID_SOCKET) {
      ::shutdown(sock, SHUT_RDWR);
      ::close(sock);
    }
  }
  bool process(httplib::Stream& stream, bool close_connection, bool& connection_closed, SSL* ssl) {
    return this->process_request(stream, close_connection, connection_closed,
                                 [ssl](httplib::Request& req) {
                                   if (ssl != nullptr) req.ssl = ssl;
                                 });
  }
  std::function<bool(int fd, const ProcessRequest&)> serve_connection;

 private:
  bool process_and_close_socket(socket_t sock) override {
    return serve_connection(sock, [this](httplib::Stream& stream, bool close_connection,
                                         bool& connection_closed, SSL* ssl) {
      return process(stream, close_connection, connection_closed, ssl);
    });
  }
};

}  // namespace memwire::sideband::http
