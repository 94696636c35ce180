#pragma once

// Item 13 of issue 14: a write with a forged token (the real one, its last character changed)
// must be refused with an error, leave the 4 KiB target untouched and the writable not Complete.
// Shared by the tcp/shm tests and the verbs tests (run under integration/rxe).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <string>
#include <vector>

#include "memwire/memwire.hpp"

namespace memwire::test_support {

// The ways a probe changed the token's last character: another digit, and the same hex digit
// in the other case (the same 128 bits if case did not matter).
inline std::vector<std::string> forged_tokens(const std::string& real) {
  std::vector<std::string> forged;
  auto other = real;
  other.back() = real.back() == '0' ? '1' : '0';
  forged.push_back(other);
  // The last letter in upper case: a token is its text, not a number that text spells.
  auto letter = real.find_last_of("abcdef");
  if (letter != std::string::npos) {
    auto upper = real;
    upper[letter] = static_cast<char>(std::toupper(static_cast<unsigned char>(upper[letter])));
    forged.push_back(upper);
  }
  auto invalid = real;
  invalid.back() = 'g';
  forged.push_back(invalid);
  return forged;
}

inline void expect_forged_writes_refused(const ConnectorOptions& owner_options,
                                         const ConnectorOptions& writer_options) {
  Connector owner(owner_options), writer(writer_options);
  std::vector<std::byte> target(4096, std::byte{0x5a}), source(4096, std::byte{0xa5});
  auto writable = owner.create_writable({Descriptor(std::span(target))});
  const auto real = writable.metadata();
  for (const auto& token : forged_tokens(real.token())) {
    SCOPED_TRACE("forged token " + token + " (real " + real.token() + ")");
    auto fields = real.fields();
    fields.token = token;
    RdmaMetadata forged(std::move(fields));
    try {
      auto write = writer.begin_write({Descriptor(std::span(source))}, forged);
      write.wait_for_completion(std::chrono::seconds(30));
      ADD_FAILURE() << "the forged write completed";
    } catch (const Error& error) {
      EXPECT_TRUE(error.code() == ErrorCode::AccessDenied ||
                  error.code() == ErrorCode::InvalidMetadata)
          << error.what();
    }
    EXPECT_TRUE(std::all_of(target.begin(), target.end(), [](auto b) {
      return b == std::byte{0x5a};
    })) << "the target was written";
    EXPECT_NE(writable.status(), OperationStatus::Complete);
  }
}

}  // namespace memwire::test_support
