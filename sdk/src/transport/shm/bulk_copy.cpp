#include "transport/shm/bulk_copy.hpp"

#include <cstdint>
#include <cstring>

#include "transport/shm/second_cpu.hpp"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace memwire::detail {

void copy_bulk(void* destination, const void* source, std::size_t length) noexcept {
#if defined(__x86_64__)
  if (length >= kBulkCopyThreshold) {
    auto* to = static_cast<char*>(destination);
    const auto* from = static_cast<const char*>(source);
    // Streaming stores need 16-byte aligned destinations: align to a cache line with memcpy.
    const auto head = (64 - reinterpret_cast<std::uintptr_t>(to) % 64) % 64;
    std::memcpy(to, from, head);
    to += head;
    from += head;
    length -= head;
    for (; length >= 64; length -= 64, to += 64, from += 64) {
      const auto* in = reinterpret_cast<const __m128i*>(from);
      auto* out = reinterpret_cast<__m128i*>(to);
      const __m128i a = _mm_loadu_si128(in), b = _mm_loadu_si128(in + 1),
                    c = _mm_loadu_si128(in + 2), d = _mm_loadu_si128(in + 3);
      _mm_stream_si128(out, a);
      _mm_stream_si128(out + 1, b);
      _mm_stream_si128(out + 2, c);
      _mm_stream_si128(out + 3, d);
    }
    _mm_sfence();  // the streamed lines are visible before whoever learns the copy ended reads
    std::memcpy(to, from, length);
    return;
  }
#endif
  std::memcpy(destination, source, length);
}

void copy_bulk_split(void* destination, const void* source, std::size_t length) noexcept {
  if (length < kSplitCopyThreshold) return copy_bulk(destination, source, length);
  auto* to = static_cast<char*>(destination);
  const auto* from = static_cast<const char*>(source);
  // The halves meet on a destination cache line: no line is written by both.
  const auto middle = (reinterpret_cast<std::uintptr_t>(to) + length / 2) & ~std::uintptr_t{63};
  const std::size_t first = middle - reinterpret_cast<std::uintptr_t>(to);
  auto head = [&] { copy_bulk(to, from, first); };
  auto tail = [&] { copy_bulk(to + first, from + first, length - first); };
  if (!run_on_two_cpus(WorkRef(head), WorkRef(tail))) copy_bulk(destination, source, length);
}

}  // namespace memwire::detail
