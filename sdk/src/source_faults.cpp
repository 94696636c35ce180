#include "source_faults.hpp"

#include <algorithm>

namespace memwire::detail {

void SourceFaults::expire(std::deque<Clock::time_point>& faults, Clock::time_point now) const {
  while (!faults.empty() && now - faults.front() >= window_) faults.pop_front();
}

std::size_t SourceFaults::record(const std::string& source, Clock::time_point now) {
  auto found = sources_.find(source);
  if (found == sources_.end()) {
    if (sources_.size() >= kMaxSources) {
      // The source whose last fault is oldest goes: it is the least likely to be refused.
      auto stalest =
          std::min_element(sources_.begin(), sources_.end(), [](const auto& a, const auto& b) {
            return a.second.empty() || (!b.second.empty() && a.second.back() < b.second.back());
          });
      sources_.erase(stalest);
    }
    found = sources_.emplace(source, std::deque<Clock::time_point>{}).first;
  }
  auto& faults = found->second;
  expire(faults, now);
  faults.push_back(now);
  // Only the last `limit` matter for refusing; one more keeps the count honest for the log.
  while (faults.size() > std::max<std::size_t>(limit_, 1) + 1) faults.pop_front();
  return faults.size();
}

bool SourceFaults::refused(const std::string& source, Clock::time_point now) {
  if (limit_ == 0) return false;
  auto found = sources_.find(source);
  if (found == sources_.end()) return false;
  expire(found->second, now);
  if (found->second.empty()) {
    sources_.erase(found);
    return false;
  }
  return found->second.size() >= limit_;
}

}  // namespace memwire::detail
