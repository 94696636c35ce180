#include "util/peer_name.hpp"

#include <string>

#include "memwire/error.hpp"
#include "memwire/limits.hpp"

namespace memwire::detail {

std::string_view peer_name_problem(std::string_view name) noexcept {
  if (name.empty()) return "an empty peer name";
  if (name.size() > kMaxTagBytes) return "a peer name longer than kMaxTagBytes";
  if (name.find('\0') != std::string_view::npos) return "a peer name holding a NUL byte";
  return {};
}

void check_peer_name(std::string_view name) {
  if (auto problem = peer_name_problem(name); !problem.empty())
    throw Error(ErrorCode::InvalidArgument, std::string(problem) + " (1 to " +
                                                std::to_string(kMaxTagBytes) + " bytes, no NUL)");
}

}  // namespace memwire::detail
