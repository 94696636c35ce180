#pragma once

// What the HTTP endpoint's waiting requests (long polls, request/reply calls) hold at once: how
// many wait, and how many bytes of bodies they keep from before the body is read until they end
// (the upload and its check included: 40 calls parsing 3.6 MB bodies at once peaked at 449 MiB
// even when only two could wait). Each has its limit; one more that does not fit is answered 503
// before it waits. Without the byte limit, 40 request/
// reply calls with 4 MiB bodies took the registry from 22 to 286 MiB (issue 44).

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <string>

#include "http/server/request_rules.hpp"

namespace memwire::sideband::http {

class WaitingRequests {
 public:
  WaitingRequests(std::size_t max_requests, std::size_t max_bytes)
      : max_requests_(max_requests), max_bytes_(max_bytes) {}

  std::size_t requests() const noexcept { return requests_.load(); }
  std::size_t bytes() const noexcept { return bytes_.load(); }

  // One waiting request holding `bytes` while it lives; throws HttpStatusError(503) when
  // either limit would be passed (nothing is held then).
  class Slot {
   public:
    Slot(WaitingRequests& owner, std::size_t bytes) : owner_(owner), bytes_(bytes) {
      if (owner_.requests_.fetch_add(1) >= owner_.max_requests_) {
        owner_.requests_.fetch_sub(1);
        throw HttpStatusError(503, "too many waiting requests (max_long_polls " +
                                       std::to_string(owner_.max_requests_) + "); try again");
      }
      const auto before = owner_.bytes_.fetch_add(bytes_);
      if (bytes_ > 0 && (before + bytes_ > owner_.max_bytes_ || before + bytes_ < before)) {
        owner_.bytes_.fetch_sub(bytes_);
        owner_.requests_.fetch_sub(1);
        throw HttpStatusError(503, "waiting requests hold " + std::to_string(before) +
                                       " bytes of bodies and this one needs " +
                                       std::to_string(bytes_) + " more (max_waiting_bytes " +
                                       std::to_string(owner_.max_bytes_) + "); try again");
      }
    }
    ~Slot() {
      owner_.bytes_.fetch_sub(bytes_);
      owner_.requests_.fetch_sub(1);
    }
    // Holds `bytes` from now on, when that is less (a body smaller than it was counted).
    void shrink_to(std::size_t bytes) {
      if (bytes >= bytes_) return;
      owner_.bytes_.fetch_sub(bytes_ - bytes);
      bytes_ = bytes;
    }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

   private:
    WaitingRequests& owner_;
    std::size_t bytes_;
  };

 private:
  const std::size_t max_requests_;
  const std::size_t max_bytes_;
  std::atomic<std::size_t> requests_{0};
  std::atomic<std::size_t> bytes_{0};
};

// What a request's body will take, counted before it is read: its Content-Length, or (chunked)
// the most a body may be; never more than `most`.
inline std::size_t expected_body_bytes(const httplib::Request& req, std::size_t most) {
  const auto declared = number(req.get_header_value("Content-Length"), "Content-Length");
  if (!declared || req.has_header("Transfer-Encoding")) return most;
  return std::min(static_cast<std::size_t>(*declared), most);
}

// Reads a body that is refused and drops it, so that the client hears the answer instead of a
// connection reset under its upload; bounded by `most` (past it, the connection closes).
inline void discard_body(const httplib::ContentReader& reader, std::size_t most) {
  std::size_t seen = 0;
  const bool whole = reader([&](const char*, std::size_t size) {
    seen += size;
    return seen <= most;
  });
  if (!whole) close_after_response = true;
}

}  // namespace memwire::sideband::http
