// The verbs notices that carry remote keys (Keys, and the last keys on Accept): what a peer can
// send is bounded and round-trips; nothing here needs an RDMA device.
#include "transport/verbs/verbs_wire.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <string_view>
#include <vector>

using namespace memwire;
using namespace memwire::detail::verbs;

namespace {

TEST(VerbsWire, KeysRoundTripUpToTheLimit) {
  Notice keys;
  keys.type = NoticeType::Keys;
  keys.seq = 9;
  keys.first_index = 96;
  for (std::uint32_t i = 0; i < Notice::kMaxKeys; ++i) keys.rkeys.push_back(0x10100u + i);
  std::array<std::byte, kNoticeBytes> bytes{};
  const auto size = encode(keys, bytes);
  EXPECT_LE(size, kNoticeBytes);
  const auto back = decode(std::span(bytes).first(size));
  EXPECT_EQ(back.type, NoticeType::Keys);
  EXPECT_EQ(back.first_index, 96u);
  EXPECT_EQ(back.rkeys, keys.rkeys);
}

TEST(VerbsWire, AnAcceptCarriesKeysAndARefusalNone) {
  Notice accept;
  accept.type = NoticeType::Accept;
  accept.rkeys = {0xabcdef12};
  std::array<std::byte, kNoticeBytes> bytes{};
  auto back = decode(std::span(bytes).first(encode(accept, bytes)));
  EXPECT_EQ(back.rkeys, accept.rkeys);
  accept.error = ErrorCode::AccessDenied;
  accept.text = "wrong token";
  back = decode(std::span(bytes).first(encode(accept, bytes)));
  EXPECT_TRUE(back.rkeys.empty()) << "keys beside an error";
  EXPECT_EQ(back.text, "wrong token");
}

TEST(VerbsWire, CreditsStampedAtPostingRoundTrip) {
  Notice answer;
  answer.type = NoticeType::Result;
  answer.seq = 7;
  answer.text = std::string(Notice::kMaxText, 'x');  // the longest notice
  std::array<std::byte, kNoticeBytes> bytes{};
  const auto size = encode(answer, bytes);
  stamp_credits(std::span(bytes).first(size), 300);
  auto back = decode(std::span(bytes).first(size));
  EXPECT_EQ(back.credits, 300);
  EXPECT_EQ(back.seq, 7u);
  EXPECT_EQ(back.text, answer.text);
  Notice credits;
  credits.type = NoticeType::Credits;
  credits.credits = 32;
  back = decode(std::span(bytes).first(encode(credits, bytes)));
  EXPECT_EQ(back.type, NoticeType::Credits);
  EXPECT_EQ(back.credits, 32);
}

// A notice as a peer could write it: TEXT, then FIRST and COUNT, then the keys given.
std::vector<std::byte> raw_notice(std::string_view text, std::uint16_t count,
                                  std::size_t keys_written) {
  Notice keys;
  keys.type = NoticeType::Keys;
  std::array<std::byte, kNoticeBytes> bytes{};
  const auto header = encode(keys, bytes) - 6 - 2;  // without text length, first and count
  std::vector<std::byte> out(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(header));
  const auto put = [&](const void* data, std::size_t size) {
    const auto* from = static_cast<const std::byte*>(data);
    out.insert(out.end(), from, from + size);
  };
  const auto length = static_cast<std::uint16_t>(text.size());
  put(&length, 2);
  put(text.data(), text.size());
  const std::uint32_t first = 0;
  put(&first, 4);
  put(&count, 2);
  for (std::size_t i = 0; i < keys_written; ++i) put(&first, 4);
  return out;
}

ErrorCode decode_error(const std::vector<std::byte>& bytes) {
  try {
    decode(bytes);
  } catch (const Error& error) {
    return error.code();
  }
  return ErrorCode::InvalidArgument;  // accepted
}

TEST(VerbsWire, TooManyKeysOrKeysBesideTextAreAProtocolError) {
  EXPECT_EQ(decode_error(raw_notice("", 2, 2)), ErrorCode::InvalidArgument);  // the control
  EXPECT_EQ(decode_error(raw_notice("", Notice::kMaxKeys + 1, Notice::kMaxKeys + 1)),
            ErrorCode::Protocol);
  EXPECT_EQ(decode_error(raw_notice("", 0xffff, 8)), ErrorCode::Protocol);
  EXPECT_EQ(decode_error(raw_notice("", 9, 2)), ErrorCode::Protocol);  // keys missing
  EXPECT_EQ(decode_error(raw_notice("why", 1, 1)), ErrorCode::Protocol);
}

TEST(VerbsWire, AProtocol1PeerIsNotSpoken) {
  // Version 1 put remote keys in metadata: its notices and hellos are refused.
  Notice begin;
  std::array<std::byte, kNoticeBytes> bytes{};
  const auto size = encode(begin, bytes);
  bytes[4] = std::byte{1};
  EXPECT_THROW(decode(std::span(bytes).first(size)), Error);
  auto hello = encode_hello("old", kConnectPrivateData);
  ASSERT_TRUE(decode_hello(hello.data(), hello.size()).has_value());
  hello[4] = std::byte{1};
  EXPECT_FALSE(decode_hello(hello.data(), hello.size()).has_value());
}

TEST(VerbsWire, PoolNoticesCarryTheirGenerationAndTagByName) {
  for (auto type : {NoticeType::PoolBegin, NoticeType::PoolDone, NoticeType::PoolAbort}) {
    Notice pool;
    pool.type = type;
    pool.seq = 5;
    pool.generation = 0x1234'5678'9abcull;
    pool.tag = std::string(Notice::kMaxTag, 't');
    std::array<std::byte, kNoticeBytes> bytes{};
    const auto back = decode(std::span(bytes).first(encode(pool, bytes)));
    EXPECT_EQ(back.type, type);
    EXPECT_EQ(back.generation, pool.generation);
    EXPECT_EQ(back.tag, pool.tag);
    EXPECT_EQ(back.bytes, 0u) << "a pool notice has no byte count";
    EXPECT_TRUE(back.text.empty()) << "nor a text";
  }
}

TEST(VerbsWire, APoolTagTooLongOrHoldingANulIsRefused) {
  Notice pool;
  pool.type = NoticeType::PoolDone;
  pool.tag = "a";
  std::array<std::byte, kNoticeBytes> bytes{};
  const auto size = encode(pool, bytes);
  // The tag's length is the u16 before it; its byte is the last but six (first_index, count).
  auto tag_at = size - 6 - 1;
  bytes[tag_at] = std::byte{0};
  EXPECT_THROW(decode(std::span(bytes).first(size)), Error);
  Notice plain;
  plain.type = NoticeType::Abort;
  plain.text = std::string(Notice::kMaxTag + 1, 'x');
  const auto plain_size = encode(plain, bytes);
  bytes[5] = static_cast<std::byte>(NoticeType::PoolAbort);  // the same bytes, as a pool notice
  EXPECT_THROW(decode(std::span(bytes).first(plain_size)), Error);
}

}  // namespace
