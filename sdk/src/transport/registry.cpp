#include "transport/registry.hpp"

#include <string>

#include "memwire/error.hpp"
#include "transport/enabled_transports.hpp"
#include "transport/transport.hpp"

namespace memwire::detail {

std::unique_ptr<Transport> make_transport(std::string_view name, const TransportContext& context) {
  for (const auto& [known, factory] : kEnabledTransports)
    if (known == name) return factory(context);
  for (const auto disabled : kDisabledTransports)
    if (!disabled.empty() && disabled == name)
      throw Error(ErrorCode::InvalidArgument,
                  "transport '" + std::string(name) + "' is not built into this memwire");
  std::string known;
  for (const auto each : known_transports())
    known += (known.empty() ? "" : ", ") + std::string(each);
  throw Error(ErrorCode::InvalidArgument,
              "unknown transport '" + std::string(name) + "' (memwire knows " + known + ")");
}

std::vector<std::string_view> known_transports() {
  std::vector<std::string_view> names;
  for (const auto& [name, factory] : kEnabledTransports) names.push_back(name);
  for (const auto disabled : kDisabledTransports)
    if (!disabled.empty()) names.push_back(disabled);
  return names;
}

}  // namespace memwire::detail
