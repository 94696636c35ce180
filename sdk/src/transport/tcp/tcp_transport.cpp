#include "transport/tcp/tcp_transport.hpp"

#include "transport/stream/stream_transport.hpp"

namespace memwire::detail {

std::unique_ptr<Transport> make_tcp_transport(const TransportContext& context) {
  const auto& options = context.options;
  StreamSettings settings;
  settings.name = "tcp";
  settings.listener = listen_tcp(options.bind_address, options.port);
  // What peers are told: the advertised address (behind NAT, a port-mapped container), else the
  // bind address; a wildcard bind is reached through the host's name.
  std::string host = options.bind_address == "0.0.0.0" ? context.hostname : options.bind_address;
  auto port = local_port(settings.listener.get());
  if (!options.advertise_address.empty()) {
    host = options.advertise_address;
    const auto colon = host.rfind(':');
    if (colon != std::string::npos) {  // host:port, the port the mapping forwards to ours
      port = parse_host_port(host).port;
      host.resize(colon);
    }
  }
  settings.offer = {"tcp", HostPort{host, port}.to_string(), {}, {}};
  settings.dial = [](const std::string& address, std::chrono::milliseconds timeout) {
    return Dialled{connect_tcp(parse_host_port(address), timeout), {}};
  };
  return make_stream_transport(context, std::move(settings));
}

}  // namespace memwire::detail
