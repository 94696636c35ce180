#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace memwire::workers {

// The example graph's data: a float embedding per request id. Values are a pure function of
// (id, index) and exact in float, so the consumer can check every element it received.
inline float embedding_value(std::uint64_t id, std::size_t index) {
  auto mixed = (id * 2654435761u + index * 40503u) % 65536u;
  return static_cast<float>(mixed) / 256.0f - 128.0f;
}

inline std::vector<float> make_embedding(std::uint64_t id, std::size_t dim) {
  std::vector<float> values(dim);
  for (std::size_t i = 0; i < dim; ++i) values[i] = embedding_value(id, i);
  return values;
}

// Index of the first wrong element, or -1 when all are right.
inline long first_mismatch(std::span<const float> values, std::uint64_t id) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i] != embedding_value(id, i)) return static_cast<long>(i);
  }
  return -1;
}

// "<prefix>.req-<id>": the name a request's embedding goes by.
inline std::string embedding_name(const std::string& prefix, std::uint64_t id) {
  return prefix + ".req-" + std::to_string(id);
}

// The id in "<prefix>.req-<id>"; throws std::invalid_argument for any other name.
inline std::uint64_t embedding_id(const std::string& prefix, const std::string& name) {
  auto head = prefix + ".req-";
  if (!name.starts_with(head) || name.size() == head.size()) {
    throw std::invalid_argument("not an embedding name: " + name);
  }
  std::size_t used = 0;
  auto id = std::stoull(name.substr(head.size()), &used);
  if (used != name.size() - head.size())
    throw std::invalid_argument("not an embedding name: " + name);
  return id;
}

}  // namespace memwire::workers
