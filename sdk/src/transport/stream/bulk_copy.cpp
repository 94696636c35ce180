#include "transport/stream/bulk_copy.hpp"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>

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

namespace {

std::atomic<int> copy_helpers{0};

bool two_cpus() {
  static const bool answer = std::thread::hardware_concurrency() >= 2;
  return answer;
}

}  // namespace

void copy_bulk_split(void* destination, const void* source, std::size_t length) noexcept {
  if (length < kSplitCopyThreshold || !two_cpus()) return copy_bulk(destination, source, length);
  if (copy_helpers.fetch_add(1, std::memory_order_relaxed) >= kMostCopyHelpers) {
    copy_helpers.fetch_sub(1, std::memory_order_relaxed);
    return copy_bulk(destination, source, length);
  }
  auto* to = static_cast<char*>(destination);
  const auto* from = static_cast<const char*>(source);
  // The halves meet on a destination cache line: no line is written by both.
  const auto middle = (reinterpret_cast<std::uintptr_t>(to) + length / 2) & ~std::uintptr_t{63};
  const std::size_t first = middle - reinterpret_cast<std::uintptr_t>(to);
  std::thread helper;
  try {
    helper = std::thread([=] { copy_bulk(to + first, from + first, length - first); });
  } catch (...) {
    copy_helpers.fetch_sub(1, std::memory_order_relaxed);
    return copy_bulk(destination, source, length);
  }
  copy_bulk(to, from, first);
  helper.join();  // the helper's stores are visible to whoever learns the copy ended
  copy_helpers.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace memwire::detail
