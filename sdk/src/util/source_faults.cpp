#include "util/source_faults.hpp"

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
            const auto& x = a.second.faults;
            const auto& y = b.second.faults;
            return x.empty() || (!y.empty() && x.back() < y.back());
          });
      sources_.erase(stalest);
    }
    found = sources_.emplace(source, Source{}).first;
  }
  auto& faults = found->second.faults;
  expire(faults, now);
  faults.push_back(now);
  // Only the last `limit` matter for refusing; one more keeps the count honest for the log.
  while (faults.size() > std::max<std::size_t>(limit_, 1) + 1) faults.pop_front();
  return faults.size();
}

SourceFaults::Refusal SourceFaults::refused(const std::string& source, Clock::time_point now) {
  if (limit_ == 0) return {};
  auto found = sources_.find(source);
  if (found == sources_.end()) return {};
  auto& entry = found->second;
  expire(entry.faults, now);
  if (entry.faults.empty()) {
    sources_.erase(found);
    return {};
  }
  if (entry.faults.size() < limit_) {
    entry.reported = false;
    return {};
  }
  const bool first = !entry.reported;
  entry.reported = true;
  return {true, first};
}

}  // namespace memwire::detail
