#include "transport/tcp/tcp_transport.hpp"

#include "transport/stream/stream_transport.hpp"

namespace memwire::detail {

std::unique_ptr<Transport> make_tcp_transport(const TransportContext& context) {
  const auto& options = context.options;
  StreamSettings settings;
  settings.name = "tcp";
  settings.listener = listen_tcp(options.bind_address, options.port);
  // A wildcard bind is reached through the host's name.
  const auto host = options.bind_address == "0.0.0.0" ? context.hostname : options.bind_address;
  settings.offer = {"tcp", HostPort{host, local_port(settings.listener.get())}.to_string(), {}, {}};
  settings.dial = [](const std::string& address, std::chrono::milliseconds timeout) {
    return connect_tcp(parse_host_port(address), timeout);
  };
  return make_stream_transport(context, std::move(settings));
}

}  // namespace memwire::detail
