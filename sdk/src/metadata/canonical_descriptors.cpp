#include "metadata/canonical_descriptors.hpp"

#include <cstring>

#include "memwire/error.hpp"

namespace memwire {
namespace {

// Reads the text left to right; every method consumes what it accepts and nothing else.
class Cursor {
 public:
  explicit Cursor(std::string_view text) : text_(text) {}

  bool literal(std::string_view expected) {
    if (text_.size() - position_ < expected.size() ||
        std::memcmp(text_.data() + position_, expected.data(), expected.size()) != 0)
      return false;
    position_ += expected.size();
    return true;
  }

  // Digits with no leading zero, at most 19 of them (no overflow); zero is never valid here.
  // What follows is the caller's to check: another digit, '.' or 'e' fails its next literal.
  bool positive_number(std::uint64_t& value) {
    const std::size_t start = position_;
    if (start == text_.size() || text_[start] < '1' || text_[start] > '9') return false;
    value = 0;
    while (position_ < text_.size() && position_ - start < 19 && text_[position_] >= '0' &&
           text_[position_] <= '9') {
      value = value * 10 + static_cast<std::uint64_t>(text_[position_] - '0');
      ++position_;
    }
    return true;
  }

  // A device name as Device::to_string writes it ("cpu", "cuda:3"): lower-case letters,
  // digits and ':' up to the closing quote, which is left for the next literal.
  std::string_view device_name() {
    constexpr std::size_t kLongest = 16;
    const std::size_t start = position_;
    while (position_ < text_.size() && position_ - start <= kLongest) {
      const char c = text_[position_];
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == ':')) break;
      ++position_;
    }
    return text_.substr(start, position_ - start);
  }

  std::string_view rest() const { return text_.substr(position_); }

 private:
  std::string_view text_;
  std::size_t position_ = 0;
};

}  // namespace

std::optional<CanonicalDescriptors> read_canonical_descriptors(std::string_view text) {
  Cursor cursor(text);
  if (!cursor.literal("{\"descriptors\":[")) return std::nullopt;
  CanonicalDescriptors read;
  auto& descriptors = read.descriptors;
  std::string_view device_name;  // the last one parsed: thousands of descriptors share one
  Device device;
  do {
    if (descriptors.size() == RdmaMetadata::kMaxDescriptors) return std::nullopt;
    RemoteDescriptor descriptor;
    if (!cursor.literal("{\"device\":\"")) return std::nullopt;
    const auto name = cursor.device_name();
    if (name.empty()) return std::nullopt;
    if (name != device_name) {
      try {
        device = Device::parse(name);
      } catch (const Error&) {
        return std::nullopt;
      }
      device_name = name;
    }
    descriptor.device = device;
    if (!cursor.literal("\",\"ptr\":") || !cursor.positive_number(descriptor.ptr) ||
        !cursor.literal(",\"size\":") || !cursor.positive_number(descriptor.size) ||
        !cursor.literal("}"))
      return std::nullopt;
    if (!descriptors.empty() && descriptor.device.kind() != descriptors.front().device.kind())
      return std::nullopt;
    if (descriptor.size > RdmaMetadata::kMaxTotalSize) return std::nullopt;
    if (descriptor.ptr + descriptor.size < descriptor.ptr) return std::nullopt;
    read.total_size += descriptor.size;  // both at most 2^38: no wrap
    if (read.total_size > RdmaMetadata::kMaxTotalSize) return std::nullopt;
    descriptors.push_back(descriptor);
  } while (cursor.literal(","));
  if (!cursor.literal("]")) return std::nullopt;
  read.rest = cursor.rest();
  return read;
}

}  // namespace memwire
