#include "util/fork_generation.hpp"

#include <pthread.h>

#include <atomic>

namespace memwire::detail {
namespace {

std::atomic<std::uint64_t> generation{0};

void forked_child() noexcept { generation.fetch_add(1, std::memory_order_relaxed); }

}  // namespace

std::uint64_t fork_generation() noexcept {
  // Registered with the first object that asks, which is before any fork it must notice.
  static const bool registered = pthread_atfork(nullptr, nullptr, &forked_child) == 0;
  (void)registered;
  return generation.load(std::memory_order_relaxed);
}

}  // namespace memwire::detail
