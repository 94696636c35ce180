// The per-role NATS users of deploy/nats/roles.conf, loaded as they are into a real nats-server:
// each attack of issue 23 (finding 3) made with a reader's or another owner's credentials meets
// a permissions violation, and the owner's names and requests stay the owner's.

#include <gtest/gtest.h>
#include <nats/nats.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "memwire/error.hpp"
#include "memwire/metadata.hpp"
#include "memwire/sideband/nats.hpp"
#include "support/metadata_samples.hpp"
#include "support/nats_server.hpp"

namespace memwire::sideband {
namespace {

using namespace std::chrono_literals;
using test_support::NatsServer;
using test_support::NatsServerOptions;
using test_support::sample_metadata;

NatsServerOptions roles_server() {
  NatsServerOptions options;
  options.include_files = {MEMWIRE_DEPLOY_NATS_DIR "/roles.conf"};
  options.environment = {
      "MEMWIRE_NATS_ADMIN_PASSWORD=admin-pw-0123", "MEMWIRE_NATS_OWNER_EMB_PASSWORD=emb-pw-0123",
      "MEMWIRE_NATS_OWNER_VEC_PASSWORD=vec-pw-0123", "MEMWIRE_NATS_READER_PASSWORD=reader-pw-0123"};
  return options;
}

NatsOptions as(const NatsServer& server, const std::string& user, const std::string& password) {
  NatsOptions options;
  options.servers = {server.url()};
  options.user = user;
  options.password = password;
  options.kv_replicas = 1;
  options.request_timeout = 1s;  // a JetStream call the server drops fails soon
  return options;
}

// A client written against nats.c directly, as an attacker would: no memwire code in between.
// Counts what reaches its subscriptions and the permission violations the server reports.
class RogueClient {
 public:
  RogueClient(const NatsServer& server, const std::string& user, const std::string& password) {
    natsOptions* raw_options = nullptr;
    EXPECT_EQ(natsOptions_Create(&raw_options), NATS_OK);
    std::unique_ptr<natsOptions, decltype(&natsOptions_Destroy)> options(raw_options,
                                                                         natsOptions_Destroy);
    natsOptions_SetURL(options.get(), server.url().c_str());
    natsOptions_SetUserInfo(options.get(), user.c_str(), password.c_str());
    natsOptions_SetErrorHandler(options.get(), &RogueClient::on_error, this);
    natsConnection* raw = nullptr;
    EXPECT_EQ(natsConnection_Connect(&raw, options.get()), NATS_OK);
    connection_ = raw;
  }
  ~RogueClient() {
    for (auto* subscription : subscriptions_) natsSubscription_Destroy(subscription);
    natsConnection_Destroy(connection_);
  }

  // Subscribes `subject`; every message it receives is counted and, when it asks for a reply,
  // answered with `answer`.
  void subscribe(const std::string& subject, std::string answer) {
    answer_ = std::move(answer);
    natsSubscription* raw = nullptr;
    ASSERT_EQ(natsConnection_Subscribe(&raw, connection_, subject.c_str(), &RogueClient::on_message,
                                       this),
              NATS_OK);
    subscriptions_.push_back(raw);
    ASSERT_EQ(natsConnection_FlushTimeout(connection_, 2000), NATS_OK);
  }

  // Publishes `data` on `subject` as this client (a raw KV put, when it is a $KV subject).
  void publish(const std::string& subject, const std::string& data) {
    EXPECT_EQ(natsConnection_Publish(connection_, subject.c_str(), data.data(),
                                     static_cast<int>(data.size())),
              NATS_OK);
    EXPECT_EQ(natsConnection_FlushTimeout(connection_, 2000), NATS_OK);
  }

  // Waits (bounded) for the server to report a permissions violation.
  bool refused(std::chrono::milliseconds timeout = 5s) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return violations_ > 0; });
  }
  int received() const { return received_.load(); }

 private:
  static void on_message(natsConnection* connection, natsSubscription*, natsMsg* message,
                         void* closure) {
    auto* self = static_cast<RogueClient*>(closure);
    ++self->received_;
    if (const char* reply = natsMsg_GetReply(message)) {
      natsConnection_Publish(connection, reply, self->answer_.data(),
                             static_cast<int>(self->answer_.size()));
    }
    natsMsg_Destroy(message);
  }
  static void on_error(natsConnection*, natsSubscription*, natsStatus status, void* closure) {
    auto* self = static_cast<RogueClient*>(closure);
    if (status != NATS_NOT_PERMITTED) return;
    std::lock_guard lock(self->mutex_);
    ++self->violations_;
    self->changed_.notify_all();
  }

  natsConnection* connection_ = nullptr;
  std::vector<natsSubscription*> subscriptions_;
  std::string answer_;
  std::atomic<int> received_{0};
  std::mutex mutex_;
  std::condition_variable changed_;
  int violations_ = 0;
};

class NatsRoles : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<NatsServer>(roles_server());
    // The operator creates the bucket; readers may not.
    NatsChannel admin(as(*server_, "memwire-admin", "admin-pw-0123"));
  }
  NatsOptions owner_emb() const { return as(*server_, "memwire-owner-emb", "emb-pw-0123"); }
  NatsOptions owner_vec() const { return as(*server_, "memwire-owner-vec", "vec-pw-0123"); }
  void TearDown() override {
    if (HasFailure()) std::cerr << server_->log();
  }
  NatsOptions reader() const { return as(*server_, "memwire-reader", "reader-pw-0123"); }

  std::unique_ptr<NatsServer> server_;
};

// The attacker's answer: a well-formed entry with metadata of its own.
std::string forged_entry() {
  return "{\"expires_at_ms\":0,\"metadata\":" + sample_metadata(666).to_json() + "}";
}

TEST_F(NatsRoles, OwnersAndReadersDoTheirWork) {
  NatsChannel owner(owner_emb());
  NatsChannel reading(reader());
  owner.publish("emb.a", sample_metadata(1), 0ms);
  EXPECT_EQ(reading.fetch("emb.a", 2s), sample_metadata(1));
  EXPECT_EQ(reading.wait_for("emb.a", 2s), sample_metadata(1));
  EXPECT_EQ(reading.list(), std::vector<std::string>{"emb.a"});
  std::vector<std::string> served;
  auto serving = owner.serve(
      "emb", [&](const std::string& name, const RdmaMetadata&) { served.push_back(name); });
  reading.request("emb.req", sample_metadata(2, OperationKind::Write), 2s);
  EXPECT_EQ(served, std::vector<std::string>{"emb.req"});
  owner.withdraw("emb.a");
  EXPECT_TRUE(reading.list().empty());
}

// A rogue subscriber on memwire.md.> would answer a fetch of a name whose publisher is not live
// (the fetch then takes the first answer): with a reader's credentials the server refuses the
// subscription, and the fetch reads the owner's entry from the registry.
TEST_F(NatsRoles, ReaderCannotAnswerFetches) {
  {
    NatsChannel owner(owner_emb());
    owner.publish("emb.x", sample_metadata(1), 0ms);
  }  // the owner's responder is gone; its entry stays in the registry
  RogueClient rogue(*server_, "memwire-reader", "reader-pw-0123");
  rogue.subscribe("memwire.md.>", forged_entry());
  EXPECT_TRUE(rogue.refused());
  NatsChannel reading(reader());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(reading.fetch("emb.x", 2s), sample_metadata(1));
  EXPECT_EQ(rogue.received(), 0);
}

// Another owner may not answer for a prefix it does not own either.
TEST_F(NatsRoles, OwnerCannotAnswerFetchesOfAnotherPrefix) {
  {
    NatsChannel owner(owner_emb());
    owner.publish("emb.x", sample_metadata(1), 0ms);
  }
  RogueClient rogue(*server_, "memwire-owner-vec", "vec-pw-0123");
  rogue.subscribe("memwire.md.emb.>", forged_entry());
  EXPECT_TRUE(rogue.refused());
  NatsChannel reading(reader());
  EXPECT_EQ(reading.fetch("emb.x", 2s), sample_metadata(1));
  EXPECT_EQ(rogue.received(), 0);
}

// A plain subscriber on memwire.get.> (outside the queue group) would receive every request's
// writable metadata with its token: refused, and the owner still serves the request.
TEST_F(NatsRoles, ReaderCannotSeeRequests) {
  NatsChannel owner(owner_emb());
  std::vector<std::string> served;
  auto serving = owner.serve(
      "emb", [&](const std::string& name, const RdmaMetadata&) { served.push_back(name); });
  RogueClient rogue(*server_, "memwire-reader", "reader-pw-0123");
  rogue.subscribe("memwire.get.>", R"({"ok":true})");
  EXPECT_TRUE(rogue.refused());
  NatsChannel reading(reader());
  reading.request("emb.req-1", sample_metadata(3, OperationKind::Write), 2s);
  EXPECT_EQ(served, std::vector<std::string>{"emb.req-1"});
  EXPECT_EQ(rogue.received(), 0);
}

// Replies travel on the requester's inbox subjects. With one "_INBOX.>" for every user, any
// credential could subscribe there and read the replies to others' fetches, requests and
// JetStream calls. Each user now has its own prefix (_INBOX_<user>) and may subscribe only that:
// another role's subscription on the reader's inboxes is refused and sees nothing of them.
TEST_F(NatsRoles, NoOtherRoleReadsTheReadersReplies) {
  NatsChannel owner(owner_emb());
  owner.publish("emb.z", sample_metadata(8), 0ms);
  auto serving = owner.serve("emb", [](const std::string&, const RdmaMetadata&) {});
  // The reader's inboxes under the default prefix of nats.c and under its own.
  for (const char* inboxes : {"_INBOX.>", "_INBOX_memwire-reader.>"}) {
    for (auto [user, password] : {std::pair{"memwire-owner-vec", "vec-pw-0123"},
                                  std::pair{"memwire-owner-emb", "emb-pw-0123"}}) {
      RogueClient rogue(*server_, user, password);
      rogue.subscribe(inboxes, "");
      EXPECT_TRUE(rogue.refused(2s)) << user << " may subscribe " << inboxes;
      NatsChannel reading(reader());
      EXPECT_EQ(reading.fetch("emb.z", 2s), sample_metadata(8));
      EXPECT_EQ(reading.wait_for("emb.z", 2s), sample_metadata(8));
      EXPECT_EQ(reading.list(), std::vector<std::string>{"emb.z"});
      reading.request("emb.req-2", sample_metadata(9, OperationKind::Write), 2s);
      EXPECT_EQ(rogue.received(), 0) << user << " read the reader's replies on " << inboxes;
    }
  }
}

// Nor may a reader serve, publish or withdraw: the server drops what it sends to the registry,
// so the calls fail and the owner's name stays.
TEST_F(NatsRoles, ReaderCannotPublishWithdrawOrServe) {
  NatsChannel owner(owner_emb());
  owner.publish("emb.y", sample_metadata(4), 0ms);
  NatsChannel reading(reader());
  // Refused, and said so: not a timeout.
  for (auto refused :
       {std::function<void()>([&] { reading.withdraw("emb.y"); }),
        std::function<void()>([&] { reading.publish("emb.y", sample_metadata(5), 0ms); })}) {
    try {
      refused();
      ADD_FAILURE() << "a reader's publish or withdraw went through";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::AccessDenied) << error.what();
      EXPECT_NE(std::string(error.what()).find("Permissions Violation"), std::string::npos)
          << error.what();
    }
  }
  NatsChannel checking(reader());
  EXPECT_EQ(checking.list(), std::vector<std::string>{"emb.y"});
  EXPECT_EQ(checking.wait_for("emb.y", 2s), sample_metadata(4));  // from the registry
  // Nor may another owner.
  NatsChannel other_owner(owner_vec());
  EXPECT_THROW(other_owner.withdraw("emb.y"), Error);
  EXPECT_EQ(checking.list(), std::vector<std::string>{"emb.y"});
  EXPECT_EQ(checking.fetch("emb.y", 2s), sample_metadata(4));
}

// The pieces of a large entry lie under the entry's own key, which only its owner may write:
// another owner can neither replace nor purge them, nor point an entry of its own at them.
TEST_F(NatsRoles, AnOwnerWritesOnlyThePiecesOfItsOwnNames) {
  auto options = roles_server();
  options.max_payload = 8192;  // a 200-descriptor metadata (about 11 KB) goes in pieces
  NatsServer server(options);
  NatsChannel admin(as(server, "memwire-admin", "admin-pw-0123"));
  const auto large = sample_metadata(7, OperationKind::Read, 200);
  NatsChannel owner(as(server, "memwire-owner-emb", "emb-pw-0123"));
  owner.publish("emb.big", large, 0ms);
  NatsChannel reading(as(server, "memwire-reader", "reader-pw-0123"));
  EXPECT_EQ(reading.fetch("emb.big", 2s), large);

  RogueClient rogue(server, "memwire-owner-vec", "vec-pw-0123");
  rogue.publish("$KV.memwire_parts.emb.big.forged.0", "{}");
  EXPECT_TRUE(rogue.refused()) << "another owner wrote a piece under emb's names";
  RogueClient purger(server, "memwire-owner-vec", "vec-pw-0123");
  purger.publish("$JS.API.STREAM.PURGE.KV_memwire_parts", "{\"filter\":\"$KV.memwire_parts.>\"}");
  EXPECT_TRUE(purger.refused()) << "another owner may purge the pieces";
  EXPECT_EQ(reading.fetch("emb.big", 2s), large);

  // An entry of vec's own that names emb's pieces: refused by the reader.
  RogueClient pointing(server, "memwire-owner-vec", "vec-pw-0123");
  pointing.publish("$KV.memwire.vec.copy",
                   "{\"expires_at_ms\":0,\"parts\":2,\"part_key\":\"emb.big.x\",\"size\":9000}");
  try {
    (void)reading.fetch("vec.copy", 2s);
    ADD_FAILURE() << "an entry pointing at another name's pieces was read";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::InvalidMetadata) << error.what();
    EXPECT_NE(std::string(error.what()).find("another name"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace memwire::sideband
