// Ids (sdk/src/util/ids.*): 128-bit random ids and their text, 32 lower-case hex digits. A text
// that is not exactly that is no id: a token with any character changed, its case included, is
// another token.
#include "util/ids.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace memwire;

TEST(Ids, TextRoundTripsAndNamesTheSameId) {
  for (int n = 0; n < 100; ++n) {
    const auto id = random_id();
    const auto text = to_hex(id);
    ASSERT_EQ(text.size(), 32u);
    EXPECT_EQ(parse_id(text), id) << text;
  }
  EXPECT_EQ(to_hex(*parse_id("00112233445566778899aabbccddeeff")),
            "00112233445566778899aabbccddeeff");
}

TEST(Ids, EveryCharacterThatIsNoLowerCaseHexDigitIsRefusedWherever) {
  const std::string good = "0123456789abcdef0123456789abcdef";
  ASSERT_TRUE(parse_id(good));
  for (std::size_t at = 0; at < good.size(); ++at) {
    for (int c = 0; c < 256; ++c) {
      const bool digit = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
      auto text = good;
      text[at] = static_cast<char>(c);
      EXPECT_EQ(parse_id(text).has_value(), digit) << "character " << c << " at " << at;
    }
  }
  EXPECT_FALSE(parse_id("0123456789ABCDEF0123456789abcdef")) << "upper case";
  EXPECT_FALSE(parse_id(good.substr(1)));
  EXPECT_FALSE(parse_id(good + "0"));
  EXPECT_FALSE(parse_id(""));
}

// Ids are drawn from the kernel ahead of use (32 a thread at a time): each is handed out once,
// across a refill and across threads.
TEST(Ids, RandomIdsAreNeverHandedOutTwice) {
  std::set<Id128> seen;
  std::mutex mutex;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      std::vector<Id128> mine;
      for (int i = 0; i < 2500; ++i) mine.push_back(random_id());
      std::lock_guard lock(mutex);
      seen.insert(mine.begin(), mine.end());
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(seen.size(), 10000u);
  EXPECT_FALSE(seen.contains(Id128{}));
}

// A forked child draws afresh: the ids its parent still holds ahead are never the child's too
// (they would be tokens two processes hand out).
TEST(Ids, AForkedChildNeverHandsOutItsParentsIdsAhead) {
  (void)random_id();  // the parent now holds ids ahead
  int pipe_ends[2];
  ASSERT_EQ(::pipe(pipe_ends), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    const auto id = random_id();
    ::_exit(::write(pipe_ends[1], id.data(), id.size()) == static_cast<ssize_t>(id.size()) ? 0 : 1);
  }
  Id128 childs{};
  ASSERT_EQ(::read(pipe_ends[0], childs.data(), childs.size()),
            static_cast<ssize_t>(childs.size()));
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(pipe_ends[0]);
  ::close(pipe_ends[1]);
  EXPECT_NE(random_id(), childs) << "the child handed out the id its parent held next";
}
