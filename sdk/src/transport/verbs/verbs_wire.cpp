#include "transport/verbs/verbs_wire.hpp"

#include <algorithm>
#include <cstring>

#include "memwire/error_codes.hpp"

namespace memwire::detail::verbs {
namespace {

constexpr std::uint32_t kNoticeMagic = 0x4e56574d;  // "MWVN"
constexpr std::uint32_t kHelloMagic = 0x4856574d;   // "MWVH"
// 2: remote keys are granted per connection (Keys notices), never carried in metadata.
// 3: every notice returns receive credits; Begin and Done say how many bytes move.
constexpr std::uint8_t kVersion = 4;  // 4: pool notices of their own
constexpr std::size_t kCreditsAt = 4 + 1 + 1 + 1 + 1;
constexpr std::size_t kHeader = kCreditsAt + 2 + 8 + 8 + 16 + 16 + 2;
constexpr std::size_t kHelloHeader = 4 + 1 + 1;
constexpr std::size_t kKeysHeader = 4 + 2;
static_assert(kHeader + Notice::kMaxText + kKeysHeader <= kNoticeBytes);
static_assert(kHeader + kKeysHeader + 4 * Notice::kMaxKeys <= kNoticeBytes);

// Little-endian fields, whatever the host: both ends may differ.
class Writer {
 public:
  explicit Writer(std::byte* out) : out_(out) {}
  void u8(std::uint8_t v) { out_[at_++] = std::byte{v}; }
  void u16(std::uint16_t v) { uint(v, 2); }
  void u32(std::uint32_t v) { uint(v, 4); }
  void u64(std::uint64_t v) { uint(v, 8); }
  void bytes(const void* data, std::size_t n) {
    std::memcpy(out_ + at_, data, n);
    at_ += n;
  }
  std::size_t size() const { return at_; }

 private:
  void uint(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_[at_++] = std::byte(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  std::byte* out_;
  std::size_t at_ = 0;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  std::uint8_t u8() { return static_cast<std::uint8_t>(uint(1)); }
  std::uint16_t u16() { return static_cast<std::uint16_t>(uint(2)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(uint(4)); }
  std::uint64_t u64() { return uint(8); }
  void bytes(void* out, std::size_t n) {
    need(n);
    std::memcpy(out, in_.data() + at_, n);
    at_ += n;
  }

 private:
  void need(std::size_t n) const {
    if (in_.size() - at_ < n) throw Error(ErrorCode::Protocol, "verbs notice truncated");
  }
  std::uint64_t uint(int n) {
    need(static_cast<std::size_t>(n));
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= std::to_integer<std::uint64_t>(in_[at_++]) << (8 * i);
    return v;
  }
  std::span<const std::byte> in_;
  std::size_t at_ = 0;
};

}  // namespace

std::size_t encode(const Notice& notice, std::span<std::byte, kNoticeBytes> out) {
  Writer writer(out.data());
  const bool pool = is_pool_notice(notice.type);
  const auto text = pool ? std::string_view(notice.tag).substr(0, Notice::kMaxTag)
                         : std::string_view(notice.text).substr(0, Notice::kMaxText);
  writer.u32(kNoticeMagic);
  writer.u8(kVersion);
  writer.u8(static_cast<std::uint8_t>(notice.type));
  writer.u8(static_cast<std::uint8_t>(notice.kind));
  writer.u8(notice.error ? wire_code(*notice.error) : 0);  // 0 = success
  writer.u16(notice.credits);
  writer.u64(notice.seq);
  writer.u64(pool ? notice.generation : notice.bytes);
  writer.bytes(notice.key.data(), notice.key.size());
  writer.bytes(notice.token.data(), notice.token.size());
  const bool keys = text.empty();
  writer.u16(static_cast<std::uint16_t>(text.size()));
  writer.bytes(text.data(), text.size());
  const auto count = keys ? std::min(notice.rkeys.size(), Notice::kMaxKeys) : 0;
  writer.u32(notice.first_index);
  writer.u16(static_cast<std::uint16_t>(count));
  for (std::size_t i = 0; i < count; ++i) writer.u32(notice.rkeys[i]);
  return writer.size();
}

Notice decode(std::span<const std::byte> in) {
  Reader reader(in);
  if (reader.u32() != kNoticeMagic) throw Error(ErrorCode::Protocol, "not a memwire verbs notice");
  if (const auto version = reader.u8(); version != kVersion)
    throw Error(ErrorCode::Protocol, "verbs notice version " + std::to_string(version) +
                                         ", this build speaks " + std::to_string(kVersion));
  Notice notice;
  const auto type = reader.u8();
  if (type < static_cast<std::uint8_t>(NoticeType::Begin) ||
      type > static_cast<std::uint8_t>(kLastNoticeType))
    throw Error(ErrorCode::Protocol, "unknown verbs notice type " + std::to_string(type));
  notice.type = static_cast<NoticeType>(type);
  const auto kind = reader.u8();
  if (kind > static_cast<std::uint8_t>(OperationKind::Write))
    throw Error(ErrorCode::Protocol, "unknown operation kind " + std::to_string(kind));
  notice.kind = static_cast<OperationKind>(kind);
  const auto code = reader.u8();
  if (code != 0 && !is_error_wire_code(code))
    throw Error(ErrorCode::Protocol, "unknown error code " + std::to_string(code));
  if (code != 0) notice.error = error_code_from_wire(code);
  notice.credits = reader.u16();
  notice.seq = reader.u64();
  const bool pool = is_pool_notice(notice.type);
  (pool ? notice.generation : notice.bytes) = reader.u64();
  reader.bytes(notice.key.data(), notice.key.size());
  reader.bytes(notice.token.data(), notice.token.size());
  const auto length = reader.u16();
  if (length > (pool ? Notice::kMaxTag : Notice::kMaxText))
    throw Error(ErrorCode::Protocol,
                pool ? "verbs pool notice tag too long" : "verbs notice text too long");
  auto& text = pool ? notice.tag : notice.text;
  text.resize(length);
  reader.bytes(text.data(), length);
  if (pool && text.find('\0') != std::string::npos)
    throw Error(ErrorCode::Protocol, "verbs pool notice tag holding a NUL byte");
  notice.first_index = reader.u32();
  const auto count = reader.u16();
  if (count > Notice::kMaxKeys || (count > 0 && length > 0))
    throw Error(ErrorCode::Protocol, "verbs notice carries too many keys");
  notice.rkeys.resize(count);
  for (auto& rkey : notice.rkeys) rkey = reader.u32();
  return notice;
}

void stamp_credits(std::span<std::byte> encoded, std::uint16_t credits) {
  if (encoded.size() < kCreditsAt + 2) return;
  Writer(encoded.data() + kCreditsAt).u16(credits);
}

std::vector<std::byte> encode_hello(std::string_view connector, std::size_t limit) {
  const auto name = connector.substr(0, std::min<std::size_t>(limit - kHelloHeader, 255));
  std::vector<std::byte> out(kHelloHeader + name.size());
  Writer writer(out.data());
  writer.u32(kHelloMagic);
  writer.u8(kVersion);
  writer.u8(static_cast<std::uint8_t>(name.size()));
  writer.bytes(name.data(), name.size());
  return out;
}

std::optional<std::string> decode_hello(const void* data, std::size_t length) {
  if (data == nullptr) return std::nullopt;
  try {
    Reader reader({static_cast<const std::byte*>(data), length});
    if (reader.u32() != kHelloMagic || reader.u8() != kVersion) return std::nullopt;
    std::string name(reader.u8(), '\0');
    reader.bytes(name.data(), name.size());
    return name;
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace memwire::detail::verbs
