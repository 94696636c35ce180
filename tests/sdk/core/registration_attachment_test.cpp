// A transport's state attached to a registration (sdk/src/core/registration.*): found by type while
// the registration lives, and revoked once, before the registration finishes, however it ends.
// The verbs transport ends every peer's memory window there (issue 20).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <vector>

#include "core/registration.hpp"
#include "core/registration_table.hpp"
#include "memwire/descriptor.hpp"

using namespace memwire;
using namespace memwire::detail;
using namespace std::chrono_literals;

namespace {

struct RecordingState final : TransportState {
  explicit RecordingState(const Registration* owner_) : owner(owner_) {}
  void revoke() noexcept override {
    ++revokes;
    finished_first = is_terminal(owner->status());
  }
  const Registration* owner;
  int revokes = 0;
  bool finished_first = false;
};

class RegistrationAttachment : public ::testing::Test {
 protected:
  std::shared_ptr<Registration> make() {
    auto registration = std::make_shared<Registration>(
        OperationKind::Read, std::vector<Descriptor>{Descriptor(memory_.data(), memory_.size())}, 0,
        table_, 1s);
    table_->insert(registration);
    return registration;
  }
  // Attaches a RecordingState; returns it (kept alive here to read after the revoke).
  std::shared_ptr<RecordingState> attach(Registration& registration) {
    auto state = std::make_unique<RecordingState>(&registration);
    registration.attach(std::move(state));
    kept_ = registration.attachment<RecordingState>();
    return kept_;
  }

  std::vector<std::byte> memory_ = std::vector<std::byte>(256);
  std::shared_ptr<RegistrationTable> table_ = std::make_shared<RegistrationTable>();
  std::shared_ptr<RecordingState> kept_;
};

TEST_F(RegistrationAttachment, IsFoundByTypeWhileLive) {
  auto registration = make();
  EXPECT_EQ(registration->attachment<RecordingState>(), nullptr);
  auto state = attach(*registration);
  ASSERT_NE(state, nullptr);
  EXPECT_EQ(state->revokes, 0);
  registration->cancel({});
  EXPECT_EQ(registration->attachment<RecordingState>(), nullptr) << "found after the revoke";
}

TEST_F(RegistrationAttachment, IsRevokedOnceBeforeACancelFinishes) {
  auto registration = make();
  auto state = attach(*registration);
  registration->cancel({});
  registration->cancel({});
  EXPECT_EQ(state->revokes, 1);
  EXPECT_FALSE(state->finished_first) << "the operation finished before its access ended";
}

TEST_F(RegistrationAttachment, IsRevokedBeforeARemoteCompletionWakesTheOwner) {
  auto registration = make();
  auto state = attach(*registration);
  bool acknowledged = false;
  registration->note_moved(memory_.size());  // a transport served every byte
  registration->complete_from_remote(registration->token(), [&] { acknowledged = true; });
  EXPECT_TRUE(acknowledged);
  EXPECT_EQ(state->revokes, 1);
  EXPECT_FALSE(state->finished_first);
  EXPECT_EQ(registration->status(), OperationStatus::Complete);
}

TEST_F(RegistrationAttachment, IsRevokedWhenTheRegistrationFailsOrIsDropped) {
  auto failed = make();
  auto failed_state = attach(*failed);
  failed->fail(Error(ErrorCode::PeerLost, "the reader's connection died"));
  EXPECT_EQ(failed_state->revokes, 1);
  EXPECT_FALSE(failed_state->finished_first);
  std::shared_ptr<RecordingState> dropped_state;
  {
    auto dropped = make();
    dropped_state = attach(*dropped);
  }
  EXPECT_EQ(dropped_state->revokes, 1);
}

}  // namespace
