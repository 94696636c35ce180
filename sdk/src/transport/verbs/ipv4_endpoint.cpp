#include "transport/verbs/ipv4_endpoint.hpp"

#include <arpa/inet.h>

#include <charconv>
#include <cstdint>

namespace memwire::detail::verbs {

std::optional<sockaddr_in> parse_ipv4_endpoint(std::string_view text) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const auto host = std::string(text.substr(0, colon));
  const auto port_text = text.substr(colon + 1);
  std::uint16_t port = 0;
  const auto [end, error] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (error != std::errc() || end != port_text.data() + port_text.size() || port == 0)
    return std::nullopt;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) return std::nullopt;
  return address;
}

std::string format_endpoint(const sockaddr* address) {
  if (address == nullptr || address->sa_family != AF_INET) return "?";
  const auto* v4 = reinterpret_cast<const sockaddr_in*>(address);
  char text[INET_ADDRSTRLEN] = {};
  if (::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text) == nullptr) return "?";
  return std::string(text) + ":" + std::to_string(ntohs(v4->sin_port));
}

}  // namespace memwire::detail::verbs
