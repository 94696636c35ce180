#pragma once

// What tests read or set to check a behaviour by count instead of by timing. Nothing outside
// tests sets a hook; the counts cost one relaxed increment where they are kept.
#include <atomic>
#include <cstdint>

namespace memwire::detail::test_hooks {

// Event-loop turns that polled instead of sleeping because of StreamOptions::busy_poll, in
// this process (every loop).
inline std::atomic<std::uint64_t> busy_polls{0};

// READs this process made itself from a peer's memory (ShmOptions::direct_reads), without
// asking the owner.
inline std::atomic<std::uint64_t> direct_reads{0};

// Runs in PoolState::admit between finding a request grant and pinning it. A test sets it to
// widen that window, so that a close() landing between the two (the race issue 44 fixed) is
// caught in every build and every run, not in a few rounds of a thousand.
inline std::atomic<void (*)()> between_grant_lookup_and_pin{nullptr};

}  // namespace memwire::detail::test_hooks
