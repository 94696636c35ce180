// RequestBroker (sideband/src/http/server/request_broker.*): request/reply between requesters and
// the servers of name prefixes, as the HTTP endpoint runs it. Requesters and servers are real
// threads blocked in submit() and poll().
#include "http/server/request_broker.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace memwire::sideband::http;
using namespace std::chrono_literals;
using Clock = RequestBroker::Clock;
using Result = RequestBroker::Result;

namespace {

// submit() on another thread.
std::future<Result> submit(RequestBroker& broker, std::string name,
                           std::chrono::milliseconds wait = 30s) {
  return std::async(std::launch::async, [&broker, name = std::move(name), wait] {
    return broker.submit(name, "document of " + name, Clock::now() + wait);
  });
}

// The one request a poll of `server` hands out within 10 s.
RequestBroker::Request take(RequestBroker& broker, const std::string& server) {
  auto requests = broker.poll(server, Clock::now() + 10s);
  if (!requests || requests->size() != 1) {
    ADD_FAILURE() << "no request for server " << server;
    return {};
  }
  return requests->front();
}

TEST(RequestBroker, ARequestReachesItsServerAndTheReplyItsRequester) {
  RequestBroker broker;
  const auto server = broker.add_server("models");
  auto requester = submit(broker, "models.llama");
  const auto request = take(broker, server);
  EXPECT_EQ(request.name, "models.llama");
  EXPECT_EQ(request.document, "document of models.llama");
  EXPECT_EQ(requester.wait_for(50ms), std::future_status::timeout) << "answered before the reply";
  EXPECT_TRUE(broker.reply(request.id, Result{true, "", ""}));
  const auto result = requester.get();
  EXPECT_TRUE(result.done);
  EXPECT_FALSE(broker.reply(request.id, Result{true, "", ""})) << "a reply counted twice";
  EXPECT_EQ(broker.pending(), 0u);
}

TEST(RequestBroker, TheServersErrorReachesTheRequester) {
  RequestBroker broker;
  const auto server = broker.add_server("");
  auto requester = submit(broker, "anything");
  const auto request = take(broker, server);
  broker.reply(request.id, Result{false, "size mismatch", "wants 4096 bytes"});
  const auto result = requester.get();
  EXPECT_FALSE(result.done);
  EXPECT_EQ(result.code, "size mismatch");
  EXPECT_EQ(result.message, "wants 4096 bytes");
}

TEST(RequestBroker, NobodyServingIsNotFoundAtOnce) {
  RequestBroker broker;
  (void)broker.add_server("models");
  const auto started = Clock::now();
  for (const char* name : {"other", "modelsx", "model", "x.models"}) {
    const auto result = broker.submit(name, "{}", Clock::now() + 30s);
    EXPECT_FALSE(result.done) << name;
    EXPECT_EQ(result.code, "not found") << name;
  }
  EXPECT_LT(Clock::now() - started, 5s) << "waited for a reply nobody could send";
  EXPECT_EQ(broker.reply("no-such-request", Result{true, "", ""}), false);
}

// A name goes to the longest live prefix that covers it: equal, or followed by a dot.
TEST(RequestBroker, TheLongestPrefixServes) {
  RequestBroker broker;
  const auto everything = broker.add_server("");
  const auto models = broker.add_server("models");
  const auto llama = broker.add_server("models.llama");
  const std::vector<std::pair<std::string, std::string>> routes = {
      {"models.llama", llama}, {"models.llama.7b", llama}, {"models.mistral", models},
      {"models", models},      {"modelsx", everything},    {"weights", everything}};
  for (const auto& [name, server] : routes) {
    auto requester = submit(broker, name);
    const auto request = take(broker, server);
    EXPECT_EQ(request.name, name);
    broker.reply(request.id, Result{true, "", ""});
    EXPECT_TRUE(requester.get().done) << name;
  }
}

TEST(RequestBroker, NoReplyInTimeIsATimeout) {
  RequestBroker broker;
  const auto server = broker.add_server("slow");
  const auto started = Clock::now();
  const auto result = broker.submit("slow.owner", "{}", Clock::now() + 200ms);  // never polled
  EXPECT_FALSE(result.done);
  EXPECT_EQ(result.code, "timeout");
  EXPECT_GE(Clock::now() - started, 200ms);
  EXPECT_EQ(broker.pending(), 0u);
  auto requests = broker.poll(server, Clock::now() + 50ms);  // the timed-out one is not handed out
  ASSERT_TRUE(requests);
  EXPECT_TRUE(requests->empty());
}

TEST(RequestBroker, PollsHandOutOneRequestEachInOrder) {
  RequestBroker broker;
  const auto server = broker.add_server("q");
  auto first = submit(broker, "q.1");
  while (broker.pending() < 1) std::this_thread::yield();
  auto second = submit(broker, "q.2");
  while (broker.pending() < 2) std::this_thread::yield();
  const auto one = take(broker, server);
  const auto two = take(broker, server);
  EXPECT_EQ(one.name, "q.1");
  EXPECT_EQ(two.name, "q.2");
  broker.reply(two.id, Result{false, "cancelled", "second"});
  broker.reply(one.id, Result{false, "cancelled", "first"});
  EXPECT_EQ(first.get().message, "first");
  EXPECT_EQ(second.get().message, "second");
}

TEST(RequestBroker, UnknownServersPollNothing) {
  RequestBroker broker;
  EXPECT_EQ(broker.poll("never-registered", Clock::now() + 10ms), std::nullopt);
  const auto server = broker.add_server("p");
  EXPECT_TRUE(broker.remove_server(server));
  EXPECT_FALSE(broker.remove_server(server));
  EXPECT_EQ(broker.poll(server, Clock::now() + 10ms), std::nullopt);
  EXPECT_EQ(broker.servers(), 0u);
}

// A server that leaves with requests queued fails them as not found, at once, unless another
// server of the same prefix is still there to take them.
TEST(RequestBroker, ALeavingServersQueueFailsUnlessAnotherServesIt) {
  RequestBroker broker;
  const auto first = broker.add_server("p");
  const auto second = broker.add_server("p");
  auto requester = submit(broker, "p.x");
  while (broker.pending() < 1) std::this_thread::yield();
  broker.remove_server(first);
  EXPECT_EQ(requester.wait_for(100ms), std::future_status::timeout) << "failed with a server left";
  broker.remove_server(second);
  ASSERT_EQ(requester.wait_for(10s), std::future_status::ready);
  const auto result = requester.get();
  EXPECT_EQ(result.code, "not found");
  EXPECT_EQ(result.message, "the server of 'p.x' left");
}

// stop() (the endpoint shutting down) releases pollers and requesters at once.
TEST(RequestBroker, StopReleasesEveryWaiter) {
  RequestBroker broker;
  const auto server = broker.add_server("s");
  auto poller =
      std::async(std::launch::async, [&] { return broker.poll(server, Clock::now() + 60s); });
  auto other = broker.add_server("t");
  auto requester = std::async(std::launch::async,
                              [&] { return broker.submit("t.x", "{}", Clock::now() + 60s); });
  while (broker.pending() < 1) std::this_thread::yield();
  EXPECT_EQ(poller.wait_for(50ms), std::future_status::timeout);
  broker.stop();
  ASSERT_EQ(poller.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(poller.get().value().empty());
  ASSERT_EQ(requester.wait_for(10s), std::future_status::ready);
  const auto result = requester.get();
  EXPECT_EQ(result.code, "transport");
  EXPECT_EQ(result.message, "the endpoint is shutting down");
  (void)other;
}

TEST(RequestBroker, SweepKeepsLiveServers) {
  RequestBroker broker;
  const auto server = broker.add_server("s");
  broker.sweep();  // registered just now: within its lease
  EXPECT_EQ(broker.servers(), 1u);
  auto requester = submit(broker, "s.x");
  const auto request = take(broker, server);
  broker.sweep();
  EXPECT_TRUE(broker.reply(request.id, Result{true, "", ""}));
  EXPECT_TRUE(requester.get().done);
}

}  // namespace
