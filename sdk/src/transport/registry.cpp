#include <functional>
#include <utility>

#include "memwire/error.hpp"
#include "transport/shm/shm_transport.hpp"
#include "transport/tcp/tcp_transport.hpp"
#include "transport/transport.hpp"
#include "transport/verbs/verbs_transport.hpp"

namespace memwire::detail {

std::unique_ptr<Transport> make_transport(std::string_view name, const TransportContext& context) {
  using Factory = std::unique_ptr<Transport> (*)(const TransportContext&);
  static constexpr std::pair<std::string_view, Factory> kFactories[] = {
      {"tcp", make_tcp_transport},
      {"shm", make_shm_transport},
      {"verbs", make_verbs_transport},
  };
  for (const auto& [known, factory] : kFactories)
    if (known == name) return factory(context);
  throw Error(ErrorCode::InvalidArgument, "unknown transport '" + std::string(name) + "'");
}

}  // namespace memwire::detail
