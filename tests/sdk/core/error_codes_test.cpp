// The one codec between ErrorCode and the wire (memwire/error_codes.hpp), and Error's parts.
#include "memwire/error_codes.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <set>
#include <string>
#include <thread>

using namespace memwire;

TEST(ErrorCodes, EveryCodeRoundTripsThroughItsNumberAndName) {
  std::set<int> numbers;
  std::set<std::string_view> names;
  for (auto code : kAllErrorCodes) {
    const auto number = wire_code(code);
    EXPECT_TRUE(is_error_wire_code(number)) << to_string(code);
    EXPECT_EQ(error_code_from_wire(number), code) << to_string(code);
    const auto name = error_code_name(code);
    ASSERT_FALSE(name.empty()) << static_cast<int>(code);
    EXPECT_EQ(error_code_from_name(name), code) << name;
    // to_string()'s text is what HTTP owners send: it reads back as the same code.
    EXPECT_EQ(error_code_from_name(to_string(code)), code) << to_string(code);
    numbers.insert(number);
    names.insert(name);
  }
  EXPECT_EQ(numbers.size(), kAllErrorCodes.size());
  EXPECT_EQ(names.size(), kAllErrorCodes.size());
}

// Peers of older builds read these: the numbers and names must never change.
TEST(ErrorCodes, WireNumbersAndNamesAreStable) {
  EXPECT_EQ(wire_code(ErrorCode::InvalidArgument), 1);
  EXPECT_EQ(wire_code(ErrorCode::Timeout), 5);
  EXPECT_EQ(wire_code(ErrorCode::AccessDenied), 8);
  EXPECT_EQ(wire_code(ErrorCode::NotFound), 10);
  EXPECT_EQ(wire_code(ErrorCode::Expired), 12);
  EXPECT_EQ(error_code_name(ErrorCode::InvalidMetadata), "invalid_metadata");
  EXPECT_EQ(error_code_name(ErrorCode::PeerLost), "peer_lost");
  EXPECT_EQ(error_code_name(ErrorCode::NotFound), "not_found");
  EXPECT_EQ(to_string(ErrorCode::AccessDenied), "access denied");
  EXPECT_EQ(to_string(ErrorCode::SizeMismatch), "size mismatch");
}

TEST(ErrorCodes, UnknownWireValuesMapToADefinedCode) {
  EXPECT_FALSE(is_error_wire_code(0));  // 0 means "no error"
  EXPECT_EQ(error_code_from_wire(0), ErrorCode::Protocol);
  for (int number = static_cast<int>(kAllErrorCodes.size()) + 1; number <= 255; ++number) {
    EXPECT_FALSE(is_error_wire_code(static_cast<std::uint8_t>(number))) << number;
    EXPECT_EQ(error_code_from_wire(static_cast<std::uint8_t>(number)), ErrorCode::Protocol)
        << number;
  }
  for (const char* name : {"", "no_such_code", "NOT_FOUND", "not-found", "not_found ", "timeouts"})
    EXPECT_EQ(error_code_from_name(name), ErrorCode::Transport) << name;
}

TEST(Error, KeepsItsMessageApartFromTheCode) {
  const Error error(ErrorCode::NotFound, "no owner of 'a.b'");
  EXPECT_EQ(error.code(), ErrorCode::NotFound);
  EXPECT_EQ(error.message(), "no owner of 'a.b'");
  EXPECT_STREQ(error.what(), "not found: no owner of 'a.b'");
  const Error copy = error;  // message() points into the copy's own text
  EXPECT_EQ(copy.message(), "no owner of 'a.b'");
  EXPECT_EQ(Error(ErrorCode::Timeout, "").message(), "");
}

// what() is a string always, as every exception's must be: also on an Error that was moved from
// (a moved-from Error once held no text, and what() read through a null pointer).
TEST(Error, AMovedFromErrorStillSaysWhatItWas) {
  Error original(ErrorCode::NotFound, "no owner of 'a.b'");
  Error moved(std::move(original));
  Error assigned(ErrorCode::Timeout, "");
  assigned = std::move(moved);
  EXPECT_STREQ(assigned.what(), "not found: no owner of 'a.b'");
  EXPECT_STREQ(original.what(), "not found: no owner of 'a.b'");  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(moved.message(), "no owner of 'a.b'");                // NOLINT(bugprone-use-after-move)
}

// An Error is copied across threads: a transport thread fails an operation and still reads its
// copy (to tell the peer) while the waiter catches its own. The last copy frees the text, and
// the freeing must be ordered after every read where a race detector can see it. Under TSan
// this failed while the text lived in std::runtime_error: libstdc++ counts that string's copies
// inside its shared library, unseen, so the free raced with the other thread's read (a CI run
// of the forged-token write test showed it).
TEST(Error, ACopyReadOnAnotherThreadIsFreedWithoutARace) {
  for (int round = 0; round < 20; ++round) {
    std::optional<Error> here(
        Error(ErrorCode::AccessDenied, "forged token " + std::to_string(round)));
    std::atomic<bool> read{false};
    std::thread other([copy = *here, &read]() mutable {
      EXPECT_EQ(copy.message().substr(0, 12), "forged token");
      // Only the count of copies may order this read before the last copy's free: relaxed.
      read.store(true, std::memory_order_relaxed);
    });
    while (!read.load(std::memory_order_relaxed)) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the thread's copy goes first
    here.reset();
    other.join();
  }
}
