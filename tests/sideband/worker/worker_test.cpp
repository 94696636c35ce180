// Worker: connector + HTTP channel, in one process with two connectors (the multi-process
// versions are in http_process_test.cpp).
#include "memwire/sideband/worker.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <future>
#include <iostream>
#include <latch>
#include <numeric>

#include "memwire/memwire.hpp"
#include "memwire/sideband/http.hpp"
#include "sideband/conformance/channel_world.hpp"
#include "sideband/worker/owner_and_peer.hpp"
#include "support/channels.hpp"
#include "support/error_code_of.hpp"
#include "support/sanitizers.hpp"
#include "support/tcp_received.hpp"
#include "support/test_peer_process.hpp"

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
  lease.close();
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

// The API's rules on a lease (a held thing): close(reason), safe while another thread waits,
// whose wait then throws Cancelled with the reason; a wait after the close throws alike.
TEST_F(WorkerTest, ClosingALeaseEndsItsWaitsWithCancelledAndTheReason) {
  auto source = pattern(16, 4);
  auto lease = producer_.publish("t.closed", {Descriptor(std::span(source))});
  auto waiting = std::async(std::launch::async, [&] {
    try {
      lease.wait(30s);
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("returned");
  });
  lease.close("the producer stopped");
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
  const auto ended = waiting.get();
  EXPECT_EQ(ended.rfind("cancelled: ", 0), 0u) << ended;
  EXPECT_NE(ended.find("the producer stopped"), std::string::npos) << ended;
  EXPECT_EQ(error_code_of([&] { lease.wait(1s); }), ErrorCode::Cancelled);
  lease.close();  // idempotent
  EXPECT_EQ(error_code_of([&] { consumer_channel_.fetch("t.closed", 1s); }), ErrorCode::NotFound);
}

TEST_F(WorkerTest, EndedLeaseWithdrawsTheName) {
  auto source = pattern(16, 3);
  { auto lease = producer_.publish("t.short", {Descriptor(std::span(source))}); }
  std::vector<std::uint32_t> target(source.size(), 7);
  EXPECT_EQ(
      error_code_of([&] { (void)consumer_.read("t.short", {Descriptor(std::span(target))}, 1s); }),
      ErrorCode::NotFound);
  EXPECT_EQ(target, std::vector<std::uint32_t>(source.size(), 7));
}

TEST_F(WorkerTest, RepublishServesAgainWithoutAGap) {
  auto source = pattern(256, 4);
  auto lease = producer_.publish("t.again", {Descriptor(std::span(source))});
  for (int round = 0; round < 3; ++round) {
    std::vector<std::uint32_t> target(source.size(), 0);
    (void)consumer_.read("t.again", {Descriptor(std::span(target))}, 5s);
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

// Issue 23, finding 9: a read whose owner never answered reported "operation not finished
// after 0 ms" (what was left of the timeout after the lookup), not the caller's timeout.
TEST_F(WorkerTest, AReadThatTimesOutNamesTheCallersTimeout) {
  // An owner that takes the connection (the kernel's backlog) and never says a word.
  int mute = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  ASSERT_EQ(::bind(mute, reinterpret_cast<sockaddr*>(&address), length), 0);
  ASSERT_EQ(::listen(mute, 16), 0);
  ::getsockname(mute, reinterpret_cast<sockaddr*>(&address), &length);
  ConnectorOptions tcp_only;
  tcp_only.transports = {"tcp"};
  Connector owner(tcp_only);
  std::vector<std::uint32_t> source(64);
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  auto json = readable.metadata().to_json();
  const auto real = readable.metadata().endpoint().transports.at(0).address;
  json.replace(json.find(real), real.size(),
               "127.0.0.1:" + std::to_string(ntohs(address.sin_port)));
  producer_channel_.publish("t.mute", RdmaMetadata::from_json(json), 0ms);
  std::vector<std::uint32_t> target(source.size());
  std::string message;
  try {
    (void)consumer_.read("t.mute", {Descriptor(std::span(target))}, 300ms);
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::Timeout) << error.what();
    message = error.what();
  }
  ::close(mute);
  EXPECT_NE(message.find("reading 't.mute'"), std::string::npos) << message;
  EXPECT_NE(message.find("300 ms"), std::string::npos) << message;
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
  EXPECT_EQ(error_code_of(
                [&] { (void)consumer_.request("emb.none", {Descriptor(std::span(target))}, 5s); }),
            ErrorCode::NotFound);
  EXPECT_EQ(error_code_of(
                [&] { (void)consumer_.request("emb.big", {Descriptor(std::span(target))}, 5s); }),
            ErrorCode::SizeMismatch);
  EXPECT_EQ(error_code_of(
                [&] { (void)consumer_.request("nobody.x", {Descriptor(std::span(target))}, 1s); }),
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
  EXPECT_EQ(error_code_of(
                [&] { (void)consumer_.read("bad.pairing", {Descriptor(std::span(target))}, 2s); }),
            ErrorCode::Pairing);

  // The right shape with a forged token: the owner refuses access.
  auto readable = producer_connector_.create_readable({Descriptor(std::span(source))});
  auto real = readable.metadata();
  auto fields = real.fields();
  fields.token = std::string(32, 'f');
  RdmaMetadata forged(std::move(fields));
  producer_channel_.publish("bad.token", forged, 0ms);
  EXPECT_EQ(error_code_of(
                [&] { (void)consumer_.read("bad.token", {Descriptor(std::span(target))}, 2s); }),
            ErrorCode::AccessDenied);

  // A size that does not match the reader's memory.
  producer_channel_.publish("bad.size", real, 0ms);
  std::vector<std::uint32_t> small(8, 9);
  EXPECT_EQ(
      error_code_of([&] { (void)consumer_.read("bad.size", {Descriptor(std::span(small))}, 2s); }),
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
      (void)consumer_.read("par." + std::to_string(i), {Descriptor(std::span(targets[i]))}, 30s,
                           Worker::Lookup::WaitUntilPublished);
    }));
  }
  for (auto& task : tasks) task.get();
  for (int i = 0; i < kNames; ++i) {
    EXPECT_EQ(targets[i], sources[i]) << i;
    EXPECT_EQ(leases[i]->wait(5s), OperationStatus::Complete) << i;
  }
}

// ReadableOperation::renew, what the Worker's renewals rest on: access stays open past the
// first expiry under the same key and token; the old metadata still expires on the reader.
TEST(OperationRenew, ExtendsAccessUnderTheSameKeyAndToken) {
  ConnectorOptions short_lived;
  short_lived.metadata_ttl = 300ms;
  Connector owner(short_lived), reader;
  auto source = pattern(512, 21);
  auto readable = owner.create_readable({Descriptor(std::span(source))});
  auto first = readable.metadata();
  auto renewed = readable.renew(2s);
  EXPECT_EQ(renewed.notification_key(), first.notification_key());
  EXPECT_EQ(renewed.token(), first.token());
  EXPECT_GE(renewed.expires_at_ms(), unix_now_ms() + 1500);
  EXPECT_EQ(readable.metadata(), renewed);
  std::this_thread::sleep_for(500ms);  // past the first expiry
  std::vector<std::uint32_t> target(source.size(), 0);
  EXPECT_EQ(error_code_of([&] { (void)reader.begin_read(first, {Descriptor(std::span(target))}); }),
            ErrorCode::Expired);
  auto read = reader.begin_read(renewed, {Descriptor(std::span(target))});
  EXPECT_EQ(read.wait_for_completion(5s), OperationStatus::Complete);
  EXPECT_EQ(target, source);
}

TEST(OperationRenew, RefusesBadLifetimesAndEndedOperations) {
  ConnectorOptions short_lived;
  short_lived.metadata_ttl = 100ms;
  Connector owner(short_lived);
  std::vector<std::uint32_t> memory(16, 1);
  auto writable = owner.create_writable({Descriptor(std::span(memory))});
  EXPECT_EQ(error_code_of([&] { writable.renew(0ms); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code_of([&] { writable.renew(-5ms); }), ErrorCode::InvalidArgument);
  std::this_thread::sleep_for(250ms);
  EXPECT_EQ(error_code_of([&] { writable.renew(1s); }), ErrorCode::Expired);

  auto readable = owner.create_readable({Descriptor(std::span(memory))});
  readable.cancel();
  EXPECT_EQ(error_code_of([&] { readable.renew(1s); }), ErrorCode::Cancelled);

  // Metadata that never expires stays so; a huge lifetime saturates instead of wrapping.
  ConnectorOptions forever;
  forever.metadata_ttl = 0ms;
  Connector keeper(forever);
  auto kept = keeper.create_readable({Descriptor(std::span(memory))});
  EXPECT_EQ(kept.renew(1s).expires_at_ms(), 0);
  auto far = owner.create_readable({Descriptor(std::span(memory))});
  EXPECT_GT(far.renew(std::chrono::milliseconds::max()).expires_at_ms(), unix_now_ms());
}

// Publications that outlive their metadata's lifetime: a producer whose connector hands out
// metadata valid for 1 s, read 2.5 s later, over a real HTTP endpoint and a real nats-server.
// Without renewal the name and the memory's access expire together. (A shorter lifetime leaves
// renewals too little slack on a loaded machine or under sanitizers.)
class LeaseRenewalTest : public ::testing::TestWithParam<std::string> {
 protected:
  static constexpr auto kLifetime = 1000ms;

  void SetUp() override {
    world_ = conformance::make_channel_world(GetParam());
    producer_channel_ = world_->connect();
    consumer_channel_ = world_->connect();
    ConnectorOptions short_lived;
    short_lived.metadata_ttl = kLifetime;
    producer_connector_ = std::make_unique<Connector>(short_lived);
    producer_ = std::make_unique<Worker>(*producer_connector_, *producer_channel_);
    consumer_ = std::make_unique<Worker>(consumer_connector_, *consumer_channel_);
  }

  std::unique_ptr<conformance::ChannelWorld> world_;  // a real server of the channel
  std::unique_ptr<Channel> producer_channel_;
  std::unique_ptr<Channel> consumer_channel_;
  std::unique_ptr<Connector> producer_connector_;
  Connector consumer_connector_;
  std::unique_ptr<Worker> producer_;
  std::unique_ptr<Worker> consumer_;
};

TEST_P(LeaseRenewalTest, LeaseOutlivesItsMetadataLifetime) {
  auto source = pattern(4096, 11);
  auto lease = producer_->publish("t.renewed", {Descriptor(std::span(source))});
  std::this_thread::sleep_for(2500ms);
  // Renewed metadata, with the same key and token: what was handed out stays valid.
  auto fetched = consumer_channel_->fetch("t.renewed", 2s);
  EXPECT_EQ(fetched.notification_key(), lease.operation().metadata().notification_key());
  EXPECT_GT(fetched.expires_at_ms(), std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::system_clock::now().time_since_epoch())
                                         .count());
  std::vector<std::uint32_t> target(source.size(), 0);
  auto read = consumer_->read("t.renewed", {Descriptor(std::span(target))}, 5s);
  EXPECT_EQ(read.status(), OperationStatus::Complete);
  EXPECT_EQ(target, source);
  EXPECT_EQ(lease.wait(5s), OperationStatus::Complete);
  lease.close();
  EXPECT_EQ(error_code_of([&] { consumer_channel_->fetch("t.renewed", 1s); }), ErrorCode::NotFound);
}

TEST_P(LeaseRenewalTest, RepublishedLeaseIsRenewedToo) {
  auto source = pattern(1024, 12);
  auto lease = producer_->publish("t.again", {Descriptor(std::span(source))});
  for (int round = 0; round < 2; ++round) {
    std::this_thread::sleep_for(1500ms);
    std::vector<std::uint32_t> target(source.size(), 0);
    (void)consumer_->read("t.again", {Descriptor(std::span(target))}, 5s);
    EXPECT_EQ(target, source) << round;
    EXPECT_EQ(lease.wait(5s), OperationStatus::Complete);
    producer_->republish(lease, {Descriptor(std::span(source))});
  }
}

// A publisher's ttl still ends the name: renewals stop there.
TEST_P(LeaseRenewalTest, RenewalStopsAtThePublishersTtl) {
  auto source = pattern(256, 13);
  auto lease = producer_->publish("t.ttl", {Descriptor(std::span(source))}, 3000ms);
  std::this_thread::sleep_for(2000ms);  // past two metadata lifetimes, within the ttl
  EXPECT_NO_THROW(consumer_channel_->fetch("t.ttl", 2s));
  std::this_thread::sleep_for(2500ms);  // past the ttl
  EXPECT_EQ(error_code_of([&] { consumer_channel_->fetch("t.ttl", 2s); }), ErrorCode::NotFound);
}

// Serving by request holds nothing that expires (each requester brings fresh metadata).
TEST_P(LeaseRenewalTest, ServeAnswersLongAfterItsConnectorsLifetime) {
  auto subscription = producer_->serve("emb", [](const std::string&) {
    auto data = std::make_shared<std::vector<std::uint32_t>>(pattern(64, 14));
    return ServedData{{Descriptor(std::span(*data))}, data};
  });
  std::this_thread::sleep_for(2500ms);
  std::vector<std::uint32_t> target(64, 0);
  EXPECT_EQ(consumer_->request("emb.x", {Descriptor(std::span(target))}, 5s).status(),
            OperationStatus::Complete);
  EXPECT_EQ(target, pattern(64, 14));
}

// An owner killed mid-write (issue 8 of the multi-host labs): the requester's connector sees
// the writer's connection drop at once, and the request must end then with PeerLost instead of
// waiting out its timeout for a reply that never comes. The name is served here; the writing
// is done by a separate process (tests/support/test_peer.cpp), SIGKILLed in the middle.
// The requester is the peer: a real connection that drops when the writer dies.
class RequestOwnerKilledTest : public OwnerAndPeerChannels {
 protected:
  void SetUp() override {
    OwnerAndPeerChannels::SetUp();
    requester_ = std::make_unique<Worker>(*peer_connector_, *peer_channel_);
  }

  std::unique_ptr<Worker> requester_;
};

TEST_P(RequestOwnerKilledTest, RequesterGetsPeerLostPromptly) {
  // 4 KiB requests: a 256 MiB write takes long enough to be killed in the middle.
  constexpr std::size_t kSize = 256u << 20;
  std::promise<void> requester_done;
  auto released = requester_done.get_future().share();
  std::promise<std::string> writer_said;
  std::promise<std::chrono::steady_clock::time_point> killed_at;
  auto subscription =
      owner_channel_->serve("emb", [&](const std::string&, const RdmaMetadata& writable) {
        const auto received_before = memwire::test_support::tcp_bytes_read();
        auto writer = memwire::test_support::start_test_peer(
            {"active", "write", std::to_string(kSize), "3", "4096"});
        writer.write_line(writable.to_json());
        // Killed once the requester took in 1 MiB of 256: only an operation that the writer's
        // requests reached learns of the loss; the rest of this process's traffic is a few KiB.
        // Watched from now, not from the writer's "begun": bytes flow while begin_write is still
        // queueing its 65536 requests, and a sanitized writer printed "begun" only after all
        // 256 MiB had arrived (the write then completed and nothing was lost).
        const auto deadline = std::chrono::steady_clock::now() + 30s;
        while (memwire::test_support::tcp_bytes_read() < received_before + (1u << 20) &&
               std::chrono::steady_clock::now() < deadline)
          std::this_thread::sleep_for(1ms);
        writer.kill(SIGKILL);
        killed_at.set_value(std::chrono::steady_clock::now());
        writer.wait(10s);
        // "begun" at most (nothing, if it was killed inside begin_write): never a result.
        std::string said;
        while (auto line = writer.read_line(0ms))
          if (*line != "begun") said += *line + "; ";
        writer_said.set_value(said.empty() ? "no result" : said);
        // A killed owner never answers: this one stays silent until the test is over.
        released.wait_for(30s);
      });
  std::vector<std::byte> target(kSize);
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(error_code_of([&] {
              (void)requester_->request("emb.big", {Descriptor(std::span(target))}, 20s);
            }),
            ErrorCode::PeerLost);
  const auto ended = std::chrono::steady_clock::now();
  requester_done.set_value();
  auto said = writer_said.get_future();
  ASSERT_EQ(said.wait_for(30s), std::future_status::ready);
  EXPECT_EQ(said.get(), "no result") << "the writer finished before it was killed";
  // From the kill, not from the start: a sanitized writer takes seconds to fill its buffer.
  auto in_ms = [](auto duration) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(duration).count();
  };
  const auto after_kill = ended - killed_at.get_future().get();
  EXPECT_LT(after_kill, 2s) << in_ms(after_kill) << " ms after the kill (a timeout is 20 s)";
  std::cout << "[ measured ] " << GetParam() << ": the request ended " << in_ms(after_kill)
            << " ms after the kill, " << in_ms(ended - started) << " ms after it began\n";
}

INSTANTIATE_TEST_SUITE_P(Channels, RequestOwnerKilledTest,
                         ::testing::ValuesIn(memwire::test_support::enabled_channels()),
                         [](const auto& info) { return info.param; });

INSTANTIATE_TEST_SUITE_P(Channels, LeaseRenewalTest,
                         ::testing::ValuesIn(memwire::test_support::enabled_channels()),
                         [](const auto& info) { return info.param; });

}  // namespace
