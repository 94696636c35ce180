// What the scheduler, the prefill worker and the decode worker of the kv_disagg example share:
// the KV pool's geometry, the bytes each request's KV holds, and the line protocol on the pipes.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace kv_disagg {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Both workers' pools: one region of kLayers x {K, V} x kSlots blocks, like an engine's
// per-layer KV tensors indexed by block id. A request holds kRequestBlocks block ids; its KV is
// those ids in every layer, for K and for V.
constexpr std::uint32_t kLayers = 12;
constexpr std::uint64_t kSlots = 16;  // block ids per layer (and per K or V)
constexpr std::uint64_t kBlockBytes = 16 << 10;
constexpr std::uint64_t kRequestBlocks = 4;
constexpr std::uint64_t kPoolBlocks = kLayers * 2 * kSlots;
constexpr auto kComputePerLayer = 15ms;  // what prefill's GPU would spend on a layer
constexpr auto kLease = 30s;             // a grant's deadline; the schedule ends well before

// The pool index of block id `id` of `layer`, K (kv = 0) or V (kv = 1).
inline std::uint64_t block_index(std::uint32_t layer, unsigned kv, std::uint64_t id) {
  return (std::uint64_t(layer) * 2 + kv) * kSlots + id;
}

// Every 8 bytes of a request's layer hold this word, so any stray byte names its writer.
inline std::uint64_t kv_word(std::string_view request, std::uint32_t layer) {
  std::uint64_t hash = 14695981039346656037ull;  // FNV-1a of "<request>/<layer>"
  for (char c : std::string(request) + "/" + std::to_string(layer)) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

inline std::string join_ids(const std::vector<std::uint64_t>& ids) {
  std::string out;
  for (auto id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
  return out;
}

inline std::vector<std::uint64_t> split_ids(const std::string& text) {
  std::vector<std::uint64_t> ids;
  std::istringstream in(text);
  for (std::string id; std::getline(in, id, ',');) ids.push_back(std::stoull(id));
  return ids;
}

inline double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Lines from a pipe, read as they come (the workers answer the scheduler one line each).
class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}
  // The next line without its newline; empty once the writer is gone.
  std::optional<std::string> next() {
    for (;;) {
      if (const auto end = buffer_.find('\n'); end != std::string::npos) {
        std::string line = buffer_.substr(0, end);
        buffer_.erase(0, end + 1);
        return line;
      }
      char chunk[4096];
      const auto got = ::read(fd_, chunk, sizeof chunk);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<std::size_t>(got));
    }
  }

 private:
  int fd_;
  std::string buffer_;
};

}  // namespace kv_disagg
