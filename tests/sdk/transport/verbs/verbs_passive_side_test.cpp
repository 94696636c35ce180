// The owner's side of the verbs protocol (VerbsPassiveSide) driven through its port, with no
// RDMA device: what it answers each notice, and what it does to the registrations, before any
// key is granted. The grants themselves need a device: verbs_access_test runs them on rxe.
#include "transport/verbs/verbs_passive_side.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <vector>

#include "core/registration.hpp"
#include "core/registration_table.hpp"
#include "memwire/descriptor.hpp"
#include "pool/pool_state.hpp"
#include "util/ids.hpp"
#include "verbs_recording_port.hpp"

namespace memwire::detail::verbs {
namespace {

using namespace std::chrono_literals;

class VerbsPassiveSideTest : public ::testing::Test {
 protected:
  std::shared_ptr<Registration> offer(OperationKind kind = OperationKind::Read) {
    auto registration = std::make_shared<Registration>(
        kind, std::vector<Descriptor>{Descriptor(memory_.data(), memory_.size())}, 0, table_, 1s);
    table_->insert(registration);
    return registration;
  }
  // A notice as a reader of `registration` would send it.
  static Notice notice(NoticeType type, const Registration& registration,
                       OperationKind kind = OperationKind::Read) {
    Notice notice;
    notice.type = type;
    notice.seq = 7;
    notice.key = registration.key();
    notice.token = registration.token();
    notice.kind = kind;
    notice.bytes = registration.registered_bytes();
    return notice;
  }
  // The one answer the side sent, of `type`.
  const Notice& answer(NoticeType type) {
    EXPECT_EQ(port_.sent.size(), 1u);
    if (port_.sent.empty()) throw std::runtime_error("no answer");
    EXPECT_EQ(port_.sent.front().type, type);
    return port_.sent.front();
  }

  std::vector<std::byte> memory_ = std::vector<std::byte>(4096);
  std::shared_ptr<RegistrationTable> table_ = std::make_shared<RegistrationTable>();
  test_support::RecordingPort port_;
  VerbsPassiveSide side_{port_, table_};
  Connection connection_{nullptr, nullptr, CmId{}, false, "reader", "10.0.0.2:1"};
};

TEST_F(VerbsPassiveSideTest, ABeginForAnUnknownKeyIsRefusedAsNotFound) {
  auto registration = offer();
  auto begin = notice(NoticeType::Begin, *registration);
  begin.key = random_id();
  side_.on_notice(connection_, begin);
  const auto& accept = answer(NoticeType::Accept);
  EXPECT_EQ(accept.seq, 7u);
  EXPECT_EQ(accept.error, ErrorCode::NotFound);
  EXPECT_TRUE(connection_.inbound.empty());
}

TEST_F(VerbsPassiveSideTest, ABeginWithAnotherTokenIsRefusedAndLeavesTheOperationAlone) {
  auto registration = offer();
  auto begin = notice(NoticeType::Begin, *registration);
  begin.token = random_id();
  side_.on_notice(connection_, begin);
  EXPECT_EQ(answer(NoticeType::Accept).error, ErrorCode::AccessDenied);
  EXPECT_TRUE(connection_.inbound.empty());
  EXPECT_FALSE(is_terminal(registration->status()));
}

TEST_F(VerbsPassiveSideTest, ABeginOfTheOtherKindIsRefused) {
  auto registration = offer(OperationKind::Read);
  side_.on_notice(connection_, notice(NoticeType::Begin, *registration, OperationKind::Write));
  EXPECT_EQ(answer(NoticeType::Accept).error, ErrorCode::AccessDenied);
  EXPECT_TRUE(connection_.inbound.empty());
}

TEST_F(VerbsPassiveSideTest, APoolBeginOfAOneShotOperationIsRefused) {
  auto registration = offer();
  side_.on_notice(connection_, notice(NoticeType::PoolBegin, *registration));
  EXPECT_EQ(answer(NoticeType::Accept).error, ErrorCode::AccessDenied);
}

TEST_F(VerbsPassiveSideTest, ABeginOfPartOfTheBytesFailsTheOperationOnBothSides) {
  auto registration = offer();
  auto begin = notice(NoticeType::Begin, *registration);
  begin.bytes = 100;
  side_.on_notice(connection_, begin);
  EXPECT_EQ(answer(NoticeType::Accept).error, ErrorCode::InvalidArgument);
  EXPECT_EQ(registration->status(), OperationStatus::Errored);
}

TEST_F(VerbsPassiveSideTest, ADoneAsksForAResultUnlessTheReaderNeedsNone) {
  auto gone = offer();
  table_->erase(gone->key());
  side_.on_notice(connection_, notice(NoticeType::Done, *gone));
  EXPECT_EQ(answer(NoticeType::Result).error, ErrorCode::Cancelled);
  port_.sent.clear();
  auto done = notice(NoticeType::Done, *gone);
  done.first_index = kDoneWithoutResult;
  side_.on_notice(connection_, done);
  EXPECT_TRUE(port_.sent.empty()) << "a Done that asks for no Result was answered";
}

TEST_F(VerbsPassiveSideTest, AReadersDoneWithoutResultCompletesTheOperationSilently) {
  auto registration = offer();
  auto done = notice(NoticeType::Done, *registration);
  done.first_index = kDoneWithoutResult;
  side_.on_notice(connection_, done);
  EXPECT_TRUE(port_.sent.empty());
  EXPECT_EQ(registration->status(), OperationStatus::Complete);
}

TEST_F(VerbsPassiveSideTest, ADoneWithAnotherTokenCompletesNothing) {
  auto registration = offer();
  auto done = notice(NoticeType::Done, *registration);
  done.token = random_id();
  side_.on_notice(connection_, done);
  EXPECT_EQ(answer(NoticeType::Result).error, ErrorCode::AccessDenied);
  EXPECT_FALSE(is_terminal(registration->status()));
}

// The reader's byte count is all the owner can check a Done against: one sent without the
// token must not count towards the next one's.
TEST_F(VerbsPassiveSideTest, ABytesCountWithoutTheTokenCountsForNothing) {
  auto registration = offer();
  auto forged = notice(NoticeType::Done, *registration);
  forged.token = random_id();
  side_.on_notice(connection_, forged);
  auto short_done = notice(NoticeType::Done, *registration);
  short_done.bytes = 0;
  side_.on_notice(connection_, short_done);
  EXPECT_NE(registration->status(), OperationStatus::Complete)
      << "a Done for no bytes completed the operation on a forged Done's count";
}

TEST_F(VerbsPassiveSideTest, AnAbortFromAConnectionThatBeganNothingChangesNothing) {
  auto registration = offer();
  auto abort = notice(NoticeType::Abort, *registration);
  abort.error = ErrorCode::Cancelled;
  side_.on_notice(connection_, abort);
  EXPECT_TRUE(port_.sent.empty());
  EXPECT_FALSE(is_terminal(registration->status()));
}

// A connection that holds a pool's keys moves later transfers without a PoolBegin: their
// PoolDone is all the owner sees of them, and is checked as a PoolBegin would be.
TEST_F(VerbsPassiveSideTest, APoolDoneUnderHeldKeysIsCheckedAsABeginWouldBe) {
  PoolOptions read_only;
  read_only.remote_write = false;
  auto registration = offer();
  auto pool = std::make_shared<PoolState>(
      read_only, 3, std::vector<BlockRegion>{{memory_.data(), 1024, 1024, 4, {}}});
  registration->make_pool(pool, *pool);
  connection_.inbound[registration->key()] = {registration, nullptr, {}};
  auto done = notice(NoticeType::PoolDone, *registration, OperationKind::Write);
  done.generation = 3;
  done.tag = "written?";
  side_.on_notice(connection_, done);
  EXPECT_EQ(answer(NoticeType::Result).error, ErrorCode::AccessDenied);
  port_.sent.clear();
  done.kind = OperationKind::Read;
  done.generation = 2;
  side_.on_notice(connection_, done);
  EXPECT_EQ(answer(NoticeType::Result).error, ErrorCode::Expired);
  EXPECT_EQ(pool->queued(), 0u) << "no tag of a refused PoolDone is delivered";
  port_.sent.clear();
  done.generation = 3;
  side_.on_notice(connection_, done);
  EXPECT_FALSE(answer(NoticeType::Result).error.has_value());
  EXPECT_EQ(pool->queued(), 1u);
}

TEST_F(VerbsPassiveSideTest, NoticesOfTheActiveSideAreIgnored) {
  auto registration = offer();
  for (auto type : {NoticeType::Accept, NoticeType::Result, NoticeType::Keys, NoticeType::Credits})
    side_.on_notice(connection_, notice(type, *registration));
  EXPECT_TRUE(port_.sent.empty());
  EXPECT_TRUE(port_.failures.empty());
  EXPECT_FALSE(is_terminal(registration->status()));
}

}  // namespace
}  // namespace memwire::detail::verbs
