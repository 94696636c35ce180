#include "util/ids.hpp"

#include <sys/random.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <system_error>

#include "util/fork_generation.hpp"

namespace memwire {

namespace {

// `length` bytes of the kernel's CSPRNG into `into`.
void fill_from_kernel(std::uint8_t* into, std::size_t length) {
  std::size_t filled = 0;
  while (filled < length) {
    ssize_t n = getrandom(into + filled, length - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(), "getrandom");
    }
    filled += static_cast<std::size_t>(n);
  }
}

// Ids ahead of use, drawn from the kernel 32 at a time per thread: a registration takes two (key
// and token), and a system call for each was a part of every READ's cost whose owner registers
// as it goes (issue 52). The same bytes the kernel gives, each handed out once; a forked child
// draws afresh (fork_generation), never the ones its parent still holds.
struct IdsAhead {
  static constexpr std::size_t kIds = 32;
  std::array<Id128, kIds> ids{};
  std::size_t next = kIds;
  std::uint64_t generation = 0;
};

}  // namespace

Id128 random_id() {
  thread_local IdsAhead ahead;
  const auto generation = detail::fork_generation();
  if (ahead.next == IdsAhead::kIds || ahead.generation != generation) {
    fill_from_kernel(ahead.ids.front().data(), sizeof ahead.ids);
    ahead.next = 0;
    ahead.generation = generation;
  }
  Id128 id = ahead.ids[ahead.next];
  ahead.ids[ahead.next++] = Id128{};  // handed out: not kept beside the ones still to come
  return id;
}

std::string to_hex(const Id128& id) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text(32, '0');
  for (std::size_t i = 0; i < id.size(); ++i) {
    text[2 * i] = kDigits[id[i] >> 4];
    text[2 * i + 1] = kDigits[id[i] & 0xf];
  }
  return text;
}

namespace {

// Each character's value as a hex digit, or -1. Lower case only, as issued: one text per id, so a
// token with any character changed (its case included) is another token, refused. A table, not
// comparisons: an id's random digits made every branch a coin toss (a fifth of a reader's
// begin_read parsing its metadata's two ids, perf).
constexpr std::array<std::int8_t, 256> kHexValue = [] {
  std::array<std::int8_t, 256> value{};
  value.fill(-1);
  for (int c = '0'; c <= '9'; ++c) value[c] = static_cast<std::int8_t>(c - '0');
  for (int c = 'a'; c <= 'f'; ++c) value[c] = static_cast<std::int8_t>(c - 'a' + 10);
  return value;
}();

}  // namespace

std::optional<Id128> parse_id(std::string_view hex) {
  if (hex.size() != 32) return std::nullopt;
  Id128 id;
  int invalid = 0;  // any digit's -1 sets its sign bit
  for (std::size_t i = 0; i < id.size(); ++i) {
    const int high = kHexValue[static_cast<unsigned char>(hex[2 * i])];
    const int low = kHexValue[static_cast<unsigned char>(hex[2 * i + 1])];
    invalid |= high | low;
    id[i] = static_cast<std::uint8_t>((high & 0xf) << 4 | (low & 0xf));
  }
  if (invalid < 0) return std::nullopt;
  return id;
}

bool equal_in_constant_time(const Id128& a, const Id128& b) noexcept {
  std::uint8_t difference = 0;
  for (std::size_t i = 0; i < a.size(); ++i) difference |= a[i] ^ b[i];
  return difference == 0;
}

}  // namespace memwire
