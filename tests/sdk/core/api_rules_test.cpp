// The API's rules (README, "The API's rules"), each checked on the public classes: every wait
// takes a deadline and throws memwire::Error for anything but what it waited for; work in
// flight ends with cancel(reason), held things with close(reason); the reason reaches the
// waits the end interrupts, on any thread. The shapes are checked by requires-expressions, so
// that a class that breaks a rule fails its test here rather than the build.
#include <gtest/gtest.h>

#include <chrono>
#include <concepts>
#include <cstdint>
#include <future>
#include <string>
#include <string_view>
#include <vector>

#include "memwire/memwire.hpp"
#include "support/error_code_of.hpp"
#include "support/loopback.hpp"
#include "support/tcp_only.hpp"

using namespace memwire;
using namespace std::chrono_literals;

namespace {

using memwire::test_support::error_of;
using std::chrono::milliseconds;

// Ends with Cancelled, and its message carries `reason`.
void expect_cancelled_with(const Error& error, const std::string& reason) {
  EXPECT_EQ(error.code(), ErrorCode::Cancelled) << error.what();
  EXPECT_NE(std::string(error.what()).find(reason), std::string::npos) << error.what();
}

// The shapes, as templates: a requires-expression fails softly only where it depends on a
// template parameter. (clang-format 14 breaks a disjunction of requires-expressions badly.)
// clang-format off

// Rule 1, waits: each takes a deadline, and none waits without one.
template <class T>
constexpr bool waits_for_completion_untimed = requires(T& t) { t.wait_for_completion(); };
template <class T>
constexpr bool takes_notifications_untimed =
    requires(T& t) { t.next_notification(); } || requires(T& t) { t.wait_for_tag("t"); };
template <class T>
constexpr bool waits_for_a_layer_untimed = requires(T& t) { t.wait(0u); };
template <class T>
constexpr bool finishes_untimed = requires(T& t) { t.finish(); };

static_assert(requires(Operation& o, BlockTransfer& b, milliseconds d) {
  { o.wait_for_completion(d) } -> std::same_as<OperationStatus>;
  { b.wait_for_completion(d) } -> std::same_as<OperationStatus>;
});
static_assert(requires(Pool& p, LayerReceiver& r, LayerSender& s, milliseconds d) {
  p.next_notification(d);
  p.wait_for_tag("t", d);
  r.wait(0u, d);
  s.finish(d);
});

// Rule 2, ending: one verb per kind of thing, each taking an optional reason.
template <class T>
constexpr bool cancels = requires(T& t, std::string_view why) { t.cancel(); t.cancel(why); };
template <class T>
constexpr bool closes = requires(T& t, std::string_view why) { t.close(); t.close(why); };
template <class T>
constexpr bool closes_without_a_reason = requires(T& t) { t.close(); };
template <class T>
constexpr bool releases = requires(T& t) { t.release(); } || requires(T& t) { t.released(); };
template <class T>
constexpr bool aborts = requires(T& t, std::string_view why) { t.abort(why); };

// clang-format on
}  // namespace

TEST(ApiRules, EveryWaitTakesADeadline) {
  EXPECT_FALSE(waits_for_completion_untimed<Operation>) << "an untimed wait is back";
  EXPECT_FALSE(waits_for_completion_untimed<BlockTransfer>);
  EXPECT_FALSE(takes_notifications_untimed<Pool>);
  EXPECT_FALSE(waits_for_a_layer_untimed<LayerReceiver>);
  EXPECT_FALSE(finishes_untimed<LayerSender>);
}

TEST(ApiRules, WorkInFlightIsCancelledAndHeldThingsAreClosed) {
  EXPECT_TRUE(cancels<Operation>);
  EXPECT_TRUE(cancels<ReadableOperation>);
  EXPECT_TRUE(cancels<WriteOperation>);
  EXPECT_TRUE(cancels<BlockTransfer>);
  EXPECT_TRUE(cancels<LayerSender>);
  EXPECT_TRUE(cancels<LayerReceiver>);
  EXPECT_TRUE(closes<Pool>);
  EXPECT_TRUE(closes<BlockGrant>);
  // Memory: nothing waits on it and no peer is told, so there is no reason to give.
  EXPECT_TRUE(closes_without_a_reason<SharedBuffer>);
  // The old names are gone.
  EXPECT_FALSE(releases<BlockGrant>);
  EXPECT_FALSE(aborts<LayerReceiver>);
}

struct ApiRulesTest : ::testing::Test {
  Connector owner{test_support::tcp_only()};
  Connector peer{test_support::tcp_only()};
  std::vector<std::byte> memory = std::vector<std::byte>(4096);
  std::vector<Descriptor> view{Descriptor(std::span(memory))};
};

// Rule 1: a wait returns only what it waited for. A locally cancelled operation's wait throws
// Cancelled with the reason, as a remotely cancelled one's does; status() still says Cancelled.
TEST_F(ApiRulesTest, ACancelledOperationsWaitThrowsCancelledWithTheReason) {
  auto readable = owner.create_readable(view);
  readable.cancel("the owner shut down");
  EXPECT_EQ(readable.status(), OperationStatus::Cancelled);
  expect_cancelled_with(error_of([&] { readable.wait_for_completion(1s); }), "the owner shut down");
  readable.cancel("again");  // idempotent: the first reason stays
  expect_cancelled_with(error_of([&] { readable.wait_for_completion(1s); }), "the owner shut down");
}

// A transfer under way (its owner accepted the connection and never answers) is cancelled with
// a reason, and its wait says so.
TEST_F(ApiRulesTest, ACancelledTransfersWaitThrowsCancelledWithTheReason) {
  test_support::SilentListener silent;
  const auto address = silent.url().substr(std::string("http://").size());
  const auto real = owner.create_readable(view).metadata();
  auto fields = real.fields();
  fields.endpoint = Endpoint{"silent", "host", {{"tcp", address, {}, {}}}};
  fields.expires_at_ms = 0;
  RdmaMetadata hung(std::move(fields));
  std::vector<std::byte> landing(memory.size());
  auto read = peer.begin_read(hung, {Descriptor(std::span(landing))});
  read.cancel("the caller left");
  EXPECT_EQ(read.status(), OperationStatus::Cancelled);
  expect_cancelled_with(error_of([&] { read.wait_for_completion(10s); }), "the caller left");
}

// Every ending call is safe while another thread waits: the waiter hears Cancelled and the
// reason, whether its wait began before the cancel or after.
TEST_F(ApiRulesTest, CancelEndsAWaitOnAnotherThreadWithTheReason) {
  auto writable = owner.create_writable(view);
  auto waiting = std::async(std::launch::async,
                            [&] { return error_of([&] { writable.wait_for_completion(30s); }); });
  writable.cancel("no writer came");
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
  expect_cancelled_with(waiting.get(), "no writer came");
}

TEST_F(ApiRulesTest, AClosedPoolsWaitsThrowCancelledWithTheReason) {
  auto pool = owner.register_pool({BlockRegion{memory.data(), 1024, 0, 4, {}}});
  auto waiting = std::async(
      std::launch::async, [&] { return error_of([&] { (void)pool.wait_for_tag("never", 30s); }); });
  pool.close("the worker is draining");
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
  expect_cancelled_with(waiting.get(), "the worker is draining");
  // Waits that begin after the close end alike, the event loops' too.
  expect_cancelled_with(error_of([&] { (void)pool.next_notification(1s); }),
                        "the worker is draining");
  expect_cancelled_with(error_of([&] { (void)pool.try_next_notification(); }),
                        "the worker is draining");
  pool.close("again");  // idempotent
}

TEST_F(ApiRulesTest, AGrantsCloseIsIdempotent) {
  auto pool = owner.register_pool({BlockRegion{memory.data(), 1024, 0, 4, {}}});
  auto grant = pool.grant("prefill", "req-1", {0, 1}, Access::Write, 30s);
  EXPECT_FALSE(grant.closed());
  grant.close("decode evicted req-1");
  EXPECT_TRUE(grant.closed());
  grant.close("again");  // idempotent
  EXPECT_TRUE(grant.closed());
}

TEST_F(ApiRulesTest, AReceiversCancelEndsItsWaitsWithTheReason) {
  auto pool = owner.register_pool({BlockRegion{memory.data(), 1024, 0, 4, {}}});
  LayerReceiver receiver(pool, pool.grant("prefill", "req-2", {0}, Access::Write, 30s), "req-2");
  auto waiting =
      std::async(std::launch::async, [&] { return error_of([&] { receiver.wait(3, 30s); }); });
  receiver.cancel("client went away");
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
  expect_cancelled_with(waiting.get(), "client went away");
  receiver.cancel();  // idempotent
}

// A sender's cancel() from another thread ends its finish() with the reason: the stream's one
// layer goes to an owner that accepted the connection and never answers.
TEST_F(ApiRulesTest, ASendersCancelEndsItsFinishOnAnotherThread) {
  test_support::SilentListener silent;
  const auto address = silent.url().substr(std::string("http://").size());
  auto pool = owner.register_pool({BlockRegion{memory.data(), 1024, 0, 4, {}}});
  const auto real = pool.metadata();
  auto fields = real.fields();
  fields.endpoint = Endpoint{"silent", "host", {{"tcp", address, {}, {}}}};
  const PoolMetadata hung(std::move(fields));
  std::vector<std::byte> here(memory.size());
  auto local = peer.register_pool({BlockRegion{here.data(), 1024, 0, 4, {}}});
  LayerSender sender(peer, local, hung, "req-4");
  sender.send(0, {{0, 0}});
  auto finishing =
      std::async(std::launch::async, [&] { return error_of([&] { sender.finish(30s); }); });
  sender.cancel("prefill preempted");
  ASSERT_EQ(finishing.wait_for(10s), std::future_status::ready);
  expect_cancelled_with(finishing.get(), "prefill preempted");
  sender.cancel();  // idempotent
}

TEST(ApiRulesSharedBuffer, CloseUnmapsItOnce) {
  SharedBuffer buffer(4096);
  ASSERT_NE(buffer.data(), nullptr);
  buffer.close();
  EXPECT_EQ(buffer.data(), nullptr);
  EXPECT_EQ(buffer.size(), 0u);
  buffer.close();  // idempotent
}
