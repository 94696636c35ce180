// The request half of every Channel (serve and request), the same cases over HTTP and NATS: the
// owner is asked to write into a requester's writable metadata and answers done or its error.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "memwire/error.hpp"
#include "memwire/error_codes.hpp"
#include "sideband/conformance/channel_world.hpp"
#include "support/error_code_of.hpp"
#include "support/metadata_samples.hpp"

namespace memwire::sideband::conformance {
namespace {

using namespace std::chrono_literals;
using test_support::error_code_of;
using test_support::sample_metadata;

class RequestConformance : public ChannelConformance {
 protected:
  const RdmaMetadata writable_ = sample_metadata(30, OperationKind::Write);
};
MEMWIRE_CHANNEL_CONFORMANCE(RequestConformance);

TEST_P(RequestConformance, RequestReplyRoundTrip) {
  std::mutex mutex;
  std::vector<std::pair<std::string, RdmaMetadata>> seen;
  auto subscription =
      owner_->serve("models.embed", [&](const std::string& name, const RdmaMetadata& writable) {
        std::lock_guard lock(mutex);
        seen.emplace_back(name, writable);  // stands for "the data was written into it"
      });
  reader_->request("models.embed.req-7", writable_, 2s);
  reader_->request("models.embed", writable_, 2s);  // the prefix itself is a served name
  {
    std::lock_guard lock(mutex);
    ASSERT_EQ(seen.size(), 2u);
    EXPECT_EQ(seen[0].first, "models.embed.req-7");
    EXPECT_EQ(seen[0].second, writable_);
    EXPECT_EQ(seen[1].first, "models.embed");
  }
  // Not under the prefix: nobody serves it; nor anything once the subscription ended.
  EXPECT_EQ(error_code_of([&] { reader_->request("models.embedding", writable_, 1s); }),
            ErrorCode::NotFound);
  subscription.reset();
  EXPECT_EQ(error_code_of([&] { reader_->request("models.embed.req-8", writable_, 1s); }),
            ErrorCode::NotFound);
}

TEST_P(RequestConformance, RequestErrors) {
  auto subscription = owner_->serve("svc", [](const std::string& name, const RdmaMetadata&) {
    if (name == "svc.missing") throw Error(ErrorCode::NotFound, "no tensor called " + name);
    if (name == "svc.small") throw Error(ErrorCode::SizeMismatch, "64 bytes wanted");
    if (name == "svc.plain") throw std::runtime_error("disk on fire");
  });
  // Nobody serves the name; "svcx" is not under "svc".
  EXPECT_EQ(error_code_of([&] { reader_->request("other", writable_, 1s); }), ErrorCode::NotFound);
  EXPECT_EQ(error_code_of([&] { reader_->request("svcx", writable_, 1s); }), ErrorCode::NotFound);
  // The owner's error comes back with its code and message.
  try {
    reader_->request("svc.small", writable_, 2s);
    ADD_FAILURE() << "request returned";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::SizeMismatch);
    EXPECT_NE(std::string(error.what()).find("64 bytes wanted"), std::string::npos) << error.what();
  }
  try {
    reader_->request("svc.missing", writable_, 2s);
    ADD_FAILURE() << "request returned";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::NotFound);
    EXPECT_NE(std::string(error.what()).find("no tensor called svc.missing"), std::string::npos)
        << error.what();
  }
  // What is not an Error is the owner's Transport failure.
  EXPECT_EQ(error_code_of([&] { reader_->request("svc.plain", writable_, 2s); }),
            ErrorCode::Transport);
  // Readable metadata cannot be written into.
  EXPECT_EQ(error_code_of([&] { reader_->request("svc.x", sample_metadata(1), 1s); }),
            ErrorCode::Pairing);
}

// Every code an owner throws reaches the requester as that code, with the name asked for and the
// owner's message once (no code text folded into it on the way).
TEST_P(RequestConformance, EveryOwnerErrorCodeCrossesTheWire) {
  auto subscription = owner_->serve("code", [](const std::string& name, const RdmaMetadata&) {
    const auto code = kAllErrorCodes.at(std::stoul(name.substr(name.rfind('.') + 1)));
    throw Error(code, "thrown as " + std::string(error_code_name(code)));
  });
  for (std::size_t i = 0; i < kAllErrorCodes.size(); ++i) {
    const auto name = "code." + std::to_string(i);
    try {
      reader_->request(name, writable_, 2s);
      ADD_FAILURE() << name << ": request returned";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), kAllErrorCodes[i]) << e.what();
      const std::string thrown = "thrown as " + std::string(error_code_name(kAllErrorCodes[i]));
      EXPECT_TRUE(e.message().ends_with(thrown)) << e.message();
      EXPECT_NE(e.message().find("'" + name + "'"), std::string_view::npos) << e.message();
      EXPECT_EQ(e.message().find(std::string(to_string(kAllErrorCodes[i])) + ": "),
                std::string_view::npos)
          << e.message();
    }
  }
}

TEST_P(RequestConformance, SlowOwnerIsTimeoutAndTheServingEndsCleanly) {
  std::promise<void> release;
  auto released = release.get_future().share();
  auto subscription = owner_->serve(
      "slow", [released](const std::string&, const RdmaMetadata&) { released.wait(); });
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(error_code_of([&] { reader_->request("slow.x", writable_, 300ms); }),
            ErrorCode::Timeout);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 2s);
  release.set_value();
  subscription.reset();  // ends promptly, its handler released
  EXPECT_EQ(error_code_of([&] { reader_->request("slow.x", writable_, 300ms); }),
            ErrorCode::NotFound);
}

// A stop on the request's token ends the wait long before its timeout: Error{Cancelled}.
TEST_P(RequestConformance, AbandonedRequestEndsBeforeItsTimeout) {
  std::promise<void> release;
  auto released = release.get_future().share();
  auto subscription = owner_->serve(
      "slow", [released](const std::string&, const RdmaMetadata&) { released.wait(); });
  std::stop_source abandon;
  std::thread stopper([&] {
    std::this_thread::sleep_for(200ms);
    abandon.request_stop();
  });
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(error_code_of([&] { reader_->request("slow.x", writable_, 20s, abandon.get_token()); }),
            ErrorCode::Cancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);  // not the 20 s timeout
  stopper.join();
  // Already abandoned: nothing to wait for.
  EXPECT_EQ(error_code_of([&] { reader_->request("slow.x", writable_, 20s, abandon.get_token()); }),
            ErrorCode::Cancelled);
  release.set_value();
}

TEST_P(RequestConformance, ServeSubscriptionMayOutliveItsChannel) {
  std::unique_ptr<Subscription> subscription;
  std::atomic<int> calls{0};
  {
    auto owner = world_->connect();
    subscription = owner->serve("kept", [&](const std::string&, const RdmaMetadata&) { ++calls; });
  }
  reader_->request("kept.alive", writable_, 2s);
  EXPECT_EQ(calls.load(), 1);
  subscription.reset();
  EXPECT_EQ(error_code_of([&] { reader_->request("kept.alive", writable_, 1s); }),
            ErrorCode::NotFound);
}

}  // namespace
}  // namespace memwire::sideband::conformance
