#pragma once
// An enum's names as a table indexed by its values (0, 1, ... Last): how the public enums and the
// event log's levels are spelled, in one way.

#include <cstddef>
#include <string_view>

namespace memwire::detail {

// names[i] names the enumerator of value i; `Last` is the enum's highest enumerator, so that a
// table without a name for each does not compile. A value outside the table is `otherwise`.
template <auto Last, std::size_t N>
constexpr std::string_view enum_name(decltype(Last) value, const std::string_view (&names)[N],
                                     std::string_view otherwise) noexcept {
  static_assert(N == static_cast<std::size_t>(Last) + 1, "one name per enumerator");
  const auto index = static_cast<std::size_t>(value);
  return index < N ? names[index] : otherwise;
}

}  // namespace memwire::detail
