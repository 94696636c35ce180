// RegistrationTable (sdk/src/core/registration_table.*): the connector's live passive operations by
// notification key, with real Registrations over real memory.
#include "core/registration_table.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "core/registration.hpp"
#include "memwire/descriptor.hpp"

using namespace memwire;
using namespace memwire::detail;
using namespace std::chrono_literals;

namespace {

class RegistrationTableTest : public ::testing::Test {
 protected:
  std::shared_ptr<Registration> add(OperationKind kind = OperationKind::Read) {
    auto registration = make(kind);
    table_->insert(registration);
    return registration;
  }
  std::shared_ptr<Registration> make(OperationKind kind = OperationKind::Read) {
    return std::make_shared<Registration>(
        kind, std::vector<Descriptor>{Descriptor(memory_.data(), memory_.size())}, 0, table_, 1s);
  }

  std::vector<std::byte> memory_ = std::vector<std::byte>(256);
  std::shared_ptr<RegistrationTable> table_ = std::make_shared<RegistrationTable>();
};

TEST_F(RegistrationTableTest, FindsWhatWasInsertedByItsKeyOnly) {
  auto first = add();
  auto second = add(OperationKind::Write);
  EXPECT_EQ(table_->find(first->key()), first);
  EXPECT_EQ(table_->find(second->key()), second);
  EXPECT_EQ(table_->find(random_id()), nullptr);
  auto not_inserted = make();
  EXPECT_EQ(table_->find(not_inserted->key()), nullptr);
}

TEST_F(RegistrationTableTest, EraseForgetsOneKey) {
  auto first = add();
  auto second = add();
  table_->erase(first->key());
  EXPECT_EQ(table_->find(first->key()), nullptr);
  EXPECT_EQ(table_->find(second->key()), second);
  table_->erase(first->key());  // twice: nothing happens
  table_->erase(random_id());
  EXPECT_EQ(table_->find(second->key()), second);
}

// The table does not keep an operation alive: once its owner drops it, it is not found.
TEST_F(RegistrationTableTest, HoldsNoOwnership) {
  auto registration = add();
  const auto key = registration->key();
  std::weak_ptr<Registration> watch = registration;
  registration.reset();
  EXPECT_TRUE(watch.expired()) << "the table kept the registration alive";
  EXPECT_EQ(table_->find(key), nullptr);
}

// A registration that ends (cancelled, revoked) takes itself out of its table.
TEST_F(RegistrationTableTest, AnEndedRegistrationLeavesTheTable) {
  auto cancelled = add();
  auto kept = add();
  cancelled->cancel({});
  EXPECT_EQ(table_->find(cancelled->key()), nullptr);
  EXPECT_EQ(table_->find(kept->key()), kept);
}

TEST_F(RegistrationTableTest, RevokeAllAbandonsEveryLiveRegistration) {
  auto first = add();
  auto second = add(OperationKind::Write);
  auto outside = make();  // never inserted: not the table's to revoke
  table_->revoke_all();
  for (const auto& registration : {first, second}) {
    EXPECT_EQ(table_->find(registration->key()), nullptr);
    EXPECT_EQ(registration->status(), OperationStatus::Cancelled);
    EXPECT_FALSE(registration->gate().is_open()) << "remote access still allowed";
  }
  EXPECT_TRUE(outside->gate().is_open());
  EXPECT_EQ(outside->status(), OperationStatus::Initialized);
  auto later = add();  // the table still works afterwards
  EXPECT_EQ(table_->find(later->key()), later);
}

// Thousands of keys coming and going in random order, the table growing and shrinking: every
// live key is found, every erased one is not (erasing moves other keys of its probe run).
TEST_F(RegistrationTableTest, KeysStayFoundWhileOthersComeAndGoInAnyOrder) {
  std::mt19937 random(5);
  std::vector<std::shared_ptr<Registration>> live, gone;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 3000; ++i) live.push_back(add());
    std::shuffle(live.begin(), live.end(), random);
    // All but a few leave: the table shrinks under them.
    while (live.size() > 20) {
      table_->erase(live.back()->key());
      gone.push_back(std::move(live.back()));
      live.pop_back();
      if (live.size() % 250 == 0) {
        for (const auto& registration : live)
          ASSERT_EQ(table_->find(registration->key()), registration) << "round " << round;
        for (const auto& registration : gone)
          ASSERT_EQ(table_->find(registration->key()), nullptr) << "round " << round;
      }
    }
  }
}

// Many live keys, found from several threads while others come and go.
TEST_F(RegistrationTableTest, ManyKeysFromManyThreads) {
  std::vector<std::shared_ptr<Registration>> live;
  for (int i = 0; i < 2000; ++i) live.push_back(add());
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (std::size_t i = static_cast<std::size_t>(t); i < live.size(); i += 4)
          if (table_->find(live[i]->key()) != live[i]) ++wrong;
        auto passing = make();
        table_->insert(passing);
        if (table_->find(passing->key()) != passing) ++wrong;
        table_->erase(passing->key());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
