// Worker: connector + HTTP channel, in one process with two connectors (the multi-process
// versions are in http_process_test.cpp).
#include "memwire/sideband/worker.hpp"

#include <gtest/gtest.h>

#include <future>
#include <latch>
#include <numeric>

#include "http_test_support.hpp"
#include "memwire/memwire.hpp"
#include "memwire/sideband/http.hpp"
#include "support/error_code_of.hpp"

namespace {

using namespace memwire;
using namespace memwire::sideband;
using namespace std::chrono_literals;
using memwire::test_support::error_code_of;

std::vector<std::uint32_t> pattern(std::size_t count, std::uint32_t seed) {
  std::vector<std::uint32_t> values(count);
  std::iota(values.begin(), values.end(), seed * 1000003u);
  return values;
}

class WorkerTest : public ::testing::Test {
 protected:
  WorkerTest()
      : endpoint_(endpoint_options()),
        producer_channel_(channel_options()),
        consumer_channel_(channel_options()),
        producer_(producer_connector_, producer_channel_),
        consumer_(consumer_connector_, consumer_channel_) {}
  static HttpEndpointOptions endpoint_options() {
    HttpEndpointOptions o;
    o.threads = 256;
    return o;
  }
  HttpChannelOptions channel_options() {
    endpoint_.start();
    HttpChannelOptions o;
    o.url = endpoint_.url();
    return o;
  }
  HttpEndpoint endpoint_;
  HttpChannel producer_channel_;
  HttpChannel consumer_channel_;
  Connector producer_connector_;
  Connector consumer_connector_;
  Worker producer_;
  Worker consumer_;
};

TEST_F(WorkerTest, ReadByNameAndTheLeaseCompletes) {
  auto source = pattern(4096, 1);
  auto lease = producer_.publish("t.a", {Descriptor(std::span(source))});
  std::vector<std::uint32_t> target(source.size(), 0);
  auto read = consumer_.read("t.a", {Descriptor(std::span(target))}, 5s);
  EXPECT_EQ(read.status(), OperationStatus::Complete);
  EXPECT_FALSE(read.transport().empty());
  EXPECT_EQ(target, source);
  EXPECT_EQ(lease.wait(5s), OperationStatus::Complete);
  lease.release();
  EXPECT_EQ(error_code_of([&] { consumer_channel_.fetch("t.a", 1s); }), ErrorCode::NotFound);
}

TEST_F(WorkerTest, ReadWaitsUntilPublished) {
  auto source = pattern(1024, 2);
  std::vector<std::uint32_t> target(source.size(), 0);
  auto reader = std::async(std::launch::async, [&] {
    return consumer_
        .read("t.later", {Descriptor(std::span(target))}, 10s, Worker::Lookup::WaitUntilPublished)
        .status();
  });
  std::this_thread::sleep_for(100ms);
  auto lease = producer_.publish("t.later", {Descriptor(std::span(source))});
  EXPECT_EQ(reader.get(), OperationStatus::Complete);
  EXPECT_EQ(target, source);
}

TEST_F(WorkerTest, EndedLeaseWithdrawsTheName) {
  auto source = pattern(16, 3);
  { auto lease = producer_.publish("t.short", {Descriptor(std::span(source))}); }
  std::vector<std::uint32_t> target(source.size(), 7);
  EXPECT_EQ(error_code_of([&] { consumer_.read("t.short", {Descriptor(std::span(target))}, 1s); }),
            ErrorCode::NotFound);
  EXPECT_EQ(target, std::vector<std::uint32_t>(source.size(), 7));
}

TEST_F(WorkerTest, RepublishServesAgainWithoutAGap) {
  auto source = pattern(256, 4);
  auto lease = producer_.publish("t.again", {Descriptor(std::span(source))});
  for (int round = 0; round < 3; ++round) {
    std::vector<std::uint32_t> target(source.size(), 0);
    consumer_.read("t.again", {Descriptor(std::span(target))}, 5s);
    EXPECT_EQ(target, source);
    EXPECT_EQ(lease.wait(5s), OperationStatus::Complete);
    producer_.republish(lease, {Descriptor(std::span(source))});
  }
}

TEST_F(WorkerTest, RequestIsWrittenByTheServingOwner) {
  auto subscription = producer_.serve("emb", [](const std::string& name) {
    auto id = static_cast<std::uint32_t>(std::stoul(name.substr(4)));
    auto data = std::make_shared<std::vector<std::uint32_t>>(pattern(512, id));
    return ServedData{{Descriptor(std::span(*data))}, data};
  });
  for (std::uint32_t id : {5u, 6u}) {
    std::vector<std::uint32_t> target(512, 0);
    auto written =
        consumer_.request("emb." + std::to_string(id), {Descriptor(std::span(target))}, 5s);
    EXPECT_EQ(written.status(), OperationStatus::Complete);
    EXPECT_EQ(target, pattern(512, id));
  }
}

TEST_F(WorkerTest, RequestErrorsReachTheRequesterAndWriteNothing) {
  auto subscription = producer_.serve("emb", [](const std::string& name) -> ServedData {
    if (name == "emb.big") {
      auto data = std::make_shared<std::vector<std::uint32_t>>(1024, 1u);
      return {{Descriptor(std::span(*data))}, data};
    }
    throw Error(ErrorCode::NotFound, "no embedding " + name);
  });
  std::vector<std::uint32_t> target(16, 9);
  EXPECT_EQ(
      error_code_of([&] { consumer_.request("emb.none", {Descriptor(std::span(target))}, 5s); }),
      ErrorCode::NotFound);
  EXPECT_EQ(
      error_code_of([&] { consumer_.request("emb.big", {Descriptor(std::span(target))}, 5s); }),
      ErrorCode::SizeMismatch);
  EXPECT_EQ(
      error_code_of([&] { consumer_.request("nobody.x", {Descriptor(std::span(target))}, 1s); }),
      ErrorCode::NotFound);
  EXPECT_EQ(target, std::vector<std::uint32_t>(16, 9));
}

TEST_F(WorkerTest, BadMetadataUnderANameWritesNothing) {
  std::vector<std::uint32_t> target(64, 9);
  const std::vector<std::uint32_t> untouched = target;
  std::vector<std::uint32_t> source = pattern(64, 8);

  // A writable operation's metadata where a readable one belongs: a pairing error.
  auto writable = producer_connector_.create_writable({Descriptor(std::span(source))});
  producer_channel_.publish("bad.pairing", writable.metadata(), 0ms);
  EXPECT_EQ(
      error_code_of([&] { consumer_.read("bad.pairing", {Descriptor(std::span(target))}, 2s); }),
      ErrorCode::Pairing);

  // The right shape with a forged token: the owner refuses access.
  auto readable = producer_connector_.create_readable({Descriptor(std::span(source))});
  auto real = readable.metadata();
  RdmaMetadata forged(real.operation_kind(), real.descriptors(), real.notification_key(),
                      real.endpoint(), std::string(32, 'f'), real.expires_at_ms());
  producer_channel_.publish("bad.token", forged, 0ms);
  EXPECT_EQ(
      error_code_of([&] { consumer_.read("bad.token", {Descriptor(std::span(target))}, 2s); }),
      ErrorCode::AccessDenied);

  // A size that does not match the reader's memory.
  producer_channel_.publish("bad.size", real, 0ms);
  std::vector<std::uint32_t> small(8, 9);
  EXPECT_EQ(error_code_of([&] { consumer_.read("bad.size", {Descriptor(std::span(small))}, 2s); }),
            ErrorCode::SizeMismatch);

  EXPECT_EQ(target, untouched);
  EXPECT_EQ(small, std::vector<std::uint32_t>(8, 9));
}

TEST_F(WorkerTest, HundredNamesPublishedAndReadConcurrently) {
  constexpr int kNames = 100;
  std::vector<std::vector<std::uint32_t>> sources, targets;
  for (int i = 0; i < kNames; ++i) {
    sources.push_back(pattern(1024, i));
    targets.emplace_back(1024, 0);
  }
  std::vector<std::optional<Lease>> leases(kNames);
  std::latch start(2 * kNames);
  std::vector<std::future<void>> tasks;
  for (int i = 0; i < kNames; ++i) {
    tasks.push_back(std::async(std::launch::async, [&, i] {
      start.arrive_and_wait();
      leases[i].emplace(
          producer_.publish("par." + std::to_string(i), {Descriptor(std::span(sources[i]))}));
    }));
    tasks.push_back(std::async(std::launch::async, [&, i] {
      start.arrive_and_wait();
      consumer_.read("par." + std::to_string(i), {Descriptor(std::span(targets[i]))}, 30s,
                     Worker::Lookup::WaitUntilPublished);
    }));
  }
  for (auto& task : tasks) task.get();
  for (int i = 0; i < kNames; ++i) {
    EXPECT_EQ(targets[i], sources[i]) << i;
    EXPECT_EQ(leases[i]->wait(5s), OperationStatus::Complete) << i;
  }
}

}  // namespace
