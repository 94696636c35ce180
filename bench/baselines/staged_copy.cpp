// Baseline for issue 51's bounded owner and issue 52's same-host target: how fast can a READ
// move between two processes on one host when the owner never touches the peer's memory?
//
//   staged  the owner copies its bytes into a staging ring it owns (a memfd both map), chunk by
//           chunk; the peer copies each chunk out on its own CPU as soon as it is there (two
//           user-space copies, pipelined on two CPUs; a stalled peer can stall only its own
//           copy, and the owner commits nothing the peer controls)
//   cross   what memwire's shm does today: the owner writes into the peer's memory with
//           process_vm_writev, split over two threads from 2 MiB on (the peer waits on a pipe)
//   memcpy  one thread copying the same bytes within the peer (its target warm)
//
//   staged_copy [--sizes 4K,1M,64M] [--slot 1M] [--slots 4] [--rounds 20]
//
// Both sides spin on the ring (no wake-ups: this is the copies' ceiling, not a protocol's). Every
// byte is checked after each round, outside the clock. Wall clock of the peer, per READ; medians.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench_support.hpp"

using namespace memwire::bench;
using Clock = std::chrono::steady_clock;

namespace {

// The shared page at the head of the ring: the peer's request, the owner's progress, the peer's.
struct Control {
  std::atomic<std::uint64_t> asked{0};     // rounds the peer asked for
  std::atomic<std::uint64_t> produced{0};  // chunks the owner put in the ring, over all rounds
  std::atomic<std::uint64_t> consumed{0};  // chunks the peer took out
  std::atomic<std::uint64_t> quit{0};
};

std::byte pattern(std::size_t offset) { return static_cast<std::byte>((offset * 7 + 3) & 0xff); }

void spin_until(const std::atomic<std::uint64_t>& value, std::uint64_t at_least) {
  while (value.load(std::memory_order_acquire) < at_least) __builtin_ia32_pause();
}

std::string size_text(std::size_t size) {
  if (size % (1u << 20) == 0) return std::to_string(size >> 20) + "M";
  if (size % 1024 == 0) return std::to_string(size >> 10) + "K";
  return std::to_string(size);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// process_vm_writev of [from, from + length) to `to` in process `pid`, whole.
bool write_into(pid_t pid, const std::byte* from, std::byte* to, std::size_t length) {
  while (length > 0) {
    const iovec local{const_cast<std::byte*>(from), length};
    const iovec remote{to, length};
    const ssize_t moved = ::process_vm_writev(pid, &local, 1, &remote, 1, 0);
    if (moved <= 0) return false;
    from += moved;
    to += moved;
    length -= static_cast<std::size_t>(moved);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  auto sizes = parse_sizes("4K,1M,64M");
  std::size_t slot = 1u << 20, slots = 4;
  int rounds = 20;
  const bool parsed =
      parse_options(argc, argv, "staged_copy",
                    {{"--sizes", [&](const std::string& value) { sizes = parse_sizes(value); }},
                     {"--slot", [&](const std::string& value) { slot = parse_sizes(value).at(0); }},
                     {"--slots", [&](const std::string& value) { slots = std::stoul(value); }},
                     {"--rounds", [&](const std::string& value) { rounds = std::stoi(value); }}});
  if (!parsed || slot == 0 || slots == 0 || rounds <= 0) return 2;
  const std::size_t largest = *std::max_element(sizes.begin(), sizes.end());

  // Before the fork: the same addresses in both processes (the peer's target, the owner's source).
  const int ring_fd = ::memfd_create("staged-copy-ring", MFD_CLOEXEC);
  const std::size_t ring_bytes = 4096 + slot * slots;
  if (ring_fd < 0 || ::ftruncate(ring_fd, static_cast<off_t>(ring_bytes)) != 0) return 1;
  auto* ring = static_cast<std::byte*>(
      ::mmap(nullptr, ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring_fd, 0));
  if (ring == MAP_FAILED) return 1;
  auto* control = new (ring) Control;
  std::byte* const chunks = ring + 4096;
  PageBuffer source(largest), target(largest), own(largest);
  int to_owner[2], to_peer[2];
  if (::pipe(to_owner) != 0 || ::pipe(to_peer) != 0) return 1;

  const pid_t peer = ::fork();
  if (peer == 0) {
    // The peer: asks, copies out (staged) or waits (cross), checks, times.
    for (std::size_t i = 0; i < largest; ++i) own.data()[i] = pattern(i);  // memcpy's source
    nlohmann::json results = nlohmann::json::array();
    std::uint64_t taken = 0;
    char byte = 0;
    for (const std::size_t size : sizes) {
      std::vector<double> staged, cross, copy;
      for (int round = 0; round < rounds; ++round) {
        // staged
        std::memset(target.data(), 0, size);
        const auto chunks_in = (size + slot - 1) / slot;
        auto started = Clock::now();
        control->asked.fetch_add(1, std::memory_order_release);
        for (std::uint64_t i = 0; i < chunks_in; ++i, ++taken) {
          spin_until(control->produced, taken + 1);
          const auto length = std::min(slot, size - i * slot);
          std::memcpy(target.data() + i * slot, chunks + (taken % slots) * slot, length);
          control->consumed.store(taken + 1, std::memory_order_release);
        }
        staged.push_back(std::chrono::duration<double, std::micro>(Clock::now() - started).count());
        for (std::size_t i = 0; i < size; ++i)
          if (target.data()[i] != pattern(i))
            return std::fprintf(stderr, "staged: byte %zu\n", i), 1;
        // cross
        std::memset(target.data(), 0, size);
        started = Clock::now();
        if (::write(to_owner[1], "c", 1) != 1 || ::read(to_peer[0], &byte, 1) != 1 || byte != 'd')
          return 1;
        cross.push_back(std::chrono::duration<double, std::micro>(Clock::now() - started).count());
        for (std::size_t i = 0; i < size; ++i)
          if (target.data()[i] != pattern(i))
            return std::fprintf(stderr, "cross: byte %zu\n", i), 1;
        // memcpy
        started = Clock::now();
        std::memcpy(target.data(), own.data(), size);
        copy.push_back(std::chrono::duration<double, std::micro>(Clock::now() - started).count());
      }
      const double staged_us = median(staged), cross_us = median(cross), copy_us = median(copy);
      auto gbps = [size](double us) { return static_cast<double>(size) / us / 1e3; };
      std::printf(
          "%-6s staged %9.1f us (%5.2f GB/s)  cross %9.1f us (%5.2f GB/s)  memcpy %9.1f us "
          "(%5.2f GB/s)  staged/cross %.2fx\n",
          size_text(size).c_str(), staged_us, gbps(staged_us), cross_us, gbps(cross_us), copy_us,
          gbps(copy_us), cross_us / staged_us);
      results.push_back({{"size", size},
                         {"staged_us", staged_us},
                         {"cross_us", cross_us},
                         {"memcpy_us", copy_us},
                         {"slot", slot},
                         {"slots", slots}});
    }
    control->quit.store(1, std::memory_order_release);
    [[maybe_unused]] auto told = ::write(to_owner[1], "q", 1);
    std::printf("%s\n", results.dump().c_str());
    std::fflush(stdout);
    ::_exit(0);
  }

  // The owner: serves staged rounds from the ring and cross rounds from the pipe, in the order
  // the peer asks for them (each size: staged, then cross, `rounds` times).
  for (std::size_t i = 0; i < largest; ++i) source.data()[i] = pattern(i);
  std::uint64_t served = 0, put = 0;
  char what = 0;
  for (const std::size_t size : sizes) {
    for (int round = 0; round < rounds; ++round) {
      spin_until(control->asked, served + 1);
      ++served;
      const auto chunks_in = (size + slot - 1) / slot;
      for (std::uint64_t i = 0; i < chunks_in; ++i, ++put) {
        if (put >= slots) spin_until(control->consumed, put - slots + 1);  // its slot is free
        const auto length = std::min(slot, size - i * slot);
        std::memcpy(chunks + (put % slots) * slot, source.data() + i * slot, length);
        control->produced.store(put + 1, std::memory_order_release);
      }
      if (::read(to_owner[0], &what, 1) != 1 || what != 'c') return 1;
      bool ok = true;
      if (size >= (std::size_t{2} << 20)) {  // two threads, as memwire's owner splits it
        const std::size_t half = (size / 2) & ~std::size_t{4095};
        std::thread second([&] {
          if (!write_into(peer, source.data() + half, target.data() + half, size - half))
            ok = false;
        });
        if (!write_into(peer, source.data(), target.data(), half)) ok = false;
        second.join();
      } else {
        ok = write_into(peer, source.data(), target.data(), size);
      }
      if (!ok || ::write(to_peer[1], "d", 1) != 1) return 1;
    }
  }
  int status = 0;
  ::waitpid(peer, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
