// A thread waiting for a small READ reads its answer off the connection itself (WaitDriver),
// in the event loop's place. The hazards of that: many waiters on one connection, a deadline
// that passes while the waiter reads, a peer lost meanwhile, and answers the waiter leaves to
// the loop (another operation's, or one that arrives as it lets go), which must still arrive.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <functional>
#include <thread>

#include "memwire/memwire.hpp"
#include "support/error_code_of.hpp"
#include "support/fake_tcp_owner.hpp"
#include "support/operation_waits.hpp"
#include "transport/stream/frame.hpp"
#include "transport/stream/socket.hpp"
#include "util/file_descriptor.hpp"

using namespace memwire;
using namespace memwire::detail;
using namespace std::chrono_literals;
using memwire::test_support::error_code_of;
using namespace memwire::test_support;

namespace {

constexpr std::size_t kSize = FakeOwnerReads::kSize;

struct WaiterReads : FakeOwnerReads {
  // Waits (without driving anything) until `operation` is final, at most `timeout`.
  static OperationStatus settled_status(const Operation& operation,
                                        std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!is_terminal(operation.status()) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(100us);
    return operation.status();
  }
  // `rounds` times: two READs begun, the first waited for and the second only watched; they
  // must get `first` and `second` bytes.
  void read_pairs(const FakeTcpOwner& fake, int rounds, std::byte first, std::byte second) {
    for (int round = 0; round < rounds; ++round) {
      targets.clear();
      targets.reserve(2);
      auto waited = begin_read(fake);
      auto other = begin_read(fake);
      ASSERT_EQ(waited.wait_for_completion(5s), OperationStatus::Complete) << "round " << round;
      ASSERT_EQ(settled_status(other, 5s), OperationStatus::Complete) << "round " << round;
      ASSERT_EQ(targets[0], std::vector<std::byte>(kSize, first)) << "round " << round;
      ASSERT_EQ(targets[1], std::vector<std::byte>(kSize, second)) << "round " << round;
    }
  }
};

}  // namespace

TEST_F(WaiterReads, TheWaiterReadsItsOwnAnswerAndRunsItsCompletion) {
  // Answered 0.5 ms after the request: the waiter is usually reading by then (it reads for a
  // few ms before it sleeps), but a loaded machine may run it late, and then the loop reads the
  // answer: at least one round of many must have run the completion on the waiting thread.
  constexpr int kRounds = 20;
  FakeTcpOwner fake([](int, int socket) {
    for (int round = 0; round < kRounds; ++round) {
      auto request = read_request(socket);
      if (request.request_id == 0) return;
      std::this_thread::sleep_for(500us);
      answer(socket, request, std::byte(0x40 + round));
    }
  });
  int on_this_thread = 0;
  for (int round = 0; round < kRounds; ++round) {
    auto read = begin_read(fake);
    std::atomic<std::thread::id> completed_on{};
    read.on_complete([&](OperationStatus) { completed_on = std::this_thread::get_id(); });
    ASSERT_EQ(read.wait_for_completion(5s), OperationStatus::Complete);
    EXPECT_EQ(targets.back(), std::vector<std::byte>(kSize, std::byte(0x40 + round)));
    // Read on this thread, not handed over from the loop's.
    if (completed_on.load() == std::this_thread::get_id()) ++on_this_thread;
  }
  EXPECT_GT(on_this_thread, 0);
}

TEST_F(WaiterReads, ADeadlineThatPassesWhileTheWaiterReadsEndsTheWaitOnTime) {
  std::atomic<bool> go{false};
  FakeTcpOwner fake([&](int, int socket) {
    auto request = read_request(socket);
    while (!go) std::this_thread::sleep_for(1ms);
    answer(socket, request, std::byte{0x43});
  });
  auto read = begin_read(fake);
  for (auto timeout : {1ms, 20ms}) {
    const auto started = std::chrono::steady_clock::now();
    EXPECT_EQ(error_code_of([&] { read.wait_for_completion(timeout); }), ErrorCode::Timeout);
    const auto waited = std::chrono::steady_clock::now() - started;
    EXPECT_GE(waited, timeout);
    EXPECT_LT(waited, timeout + 500ms) << "the answer never came: the deadline ended the wait";
  }
  // The answer that comes later still lands, read by whoever reads then.
  go = true;
  EXPECT_EQ(read.wait_for_completion(5s), OperationStatus::Complete);
  EXPECT_EQ(targets.back(), std::vector<std::byte>(kSize, std::byte{0x43}));
}

TEST_F(WaiterReads, AnAnswerHalfReadWhenTheDeadlinePassesIsFinishedByTheLoop) {
  std::atomic<bool> rest{false};
  FakeTcpOwner fake([&](int, int socket) {
    auto request = read_request(socket);
    FrameHeader header;
    header.type = FrameType::ReadResponse;
    header.request_id = request.request_id;
    header.length = request.length;
    std::vector<std::byte> payload(request.length, std::byte{0x44});
    iovec first[2] = {{&header, sizeof header}, {payload.data(), 1000}};
    send_all(socket, first, 2);
    while (!rest) std::this_thread::sleep_for(1ms);
    iovec second{payload.data() + 1000, payload.size() - 1000};
    send_all(socket, &second, 1);
  });
  auto read = begin_read(fake);
  EXPECT_EQ(error_code_of([&] { read.wait_for_completion(30ms); }), ErrorCode::Timeout);
  rest = true;
  // Nobody waits: the loop must take the rest of the payload on its own.
  EXPECT_EQ(settled_status(read, 5s), OperationStatus::Complete);
  EXPECT_EQ(targets.back(), std::vector<std::byte>(kSize, std::byte{0x44}));
}

TEST_F(WaiterReads, APeerLostWhileTheWaiterReadsFailsTheReadAtOnce) {
  FakeTcpOwner fake([](int, int socket) {
    read_request(socket);
    std::this_thread::sleep_for(20ms);
    ::shutdown(socket, SHUT_RDWR);
  });
  auto read = begin_read(fake);
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(error_code_of([&] { read.wait_for_completion(10s); }), ErrorCode::PeerLost);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
}

TEST_F(WaiterReads, AnotherOperationsAnswerLeftByTheWaiterStillCompletesIt) {
  // Both answers come in one send, the waiter's first: it stops at the other's, which the loop
  // must then handle though no edge will announce it (its bytes are read already). 0.5 ms
  // after the requests, while the waiter reads (in most rounds: see the test above).
  constexpr int kRounds = 20;
  FakeTcpOwner fake([](int, int socket) {
    for (int round = 0; round < kRounds; ++round) {
      auto first = read_request(socket);
      auto second = read_request(socket);
      if (first.request_id == 0 || second.request_id == 0) return;
      std::this_thread::sleep_for(500us);
      FrameHeader headers[2];
      std::vector<std::byte> payloads[2] = {std::vector<std::byte>(kSize, std::byte{0x51}),
                                            std::vector<std::byte>(kSize, std::byte{0x52})};
      iovec parts[4];
      for (int i = 0; i < 2; ++i) {
        headers[i].type = FrameType::ReadResponse;
        headers[i].request_id = (i == 0 ? first : second).request_id;
        headers[i].length = kSize;
        parts[2 * i] = {&headers[i], sizeof headers[i]};
        parts[2 * i + 1] = {payloads[i].data(), kSize};
      }
      send_all(socket, parts, 4);
    }
  });
  read_pairs(fake, kRounds, std::byte{0x51}, std::byte{0x52});
}

TEST_F(WaiterReads, AnAnswerArrivingAsTheWaiterLetsGoStillCompletes) {
  // The other operation's answer follows the waiter's by 0-100 us: before, while and after
  // the waiter lets go of the reading (and the loop watches the socket again). Its edge must
  // not be lost whichever way the race goes.
  constexpr int kRounds = 200;
  FakeTcpOwner fake([&](int, int socket) {
    for (int round = 0; round < kRounds; ++round) {
      auto first = read_request(socket);
      auto second = read_request(socket);
      if (first.request_id == 0 || second.request_id == 0) return;
      answer(socket, first, std::byte{0x61});
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(round % 101);
      while (std::chrono::steady_clock::now() < until) {
      }
      answer(socket, second, std::byte{0x62});
    }
  });
  read_pairs(fake, kRounds, std::byte{0x61}, std::byte{0x62});
}

// Over a real owner, tcp and shm: many threads waiting on READs over one connection at once,
// each its own bytes.
class ManyWaiters : public ::testing::TestWithParam<std::string> {};

TEST_P(ManyWaiters, EachGetsItsOwnBytes) {
  constexpr int kThreads = 6;
  constexpr int kReadsEach = 60;
  Connector owner{one_connection(GetParam())};
  Connector reader{one_connection(GetParam())};
  std::vector<std::vector<std::byte>> sources;
  std::vector<RdmaMetadata> metadata;
  std::vector<ReadableOperation> readables;
  for (int i = 0; i < kThreads * kReadsEach; ++i) {
    sources.emplace_back(kSize, std::byte(i % 251));
    readables.push_back(owner.create_readable({Descriptor(std::span(sources.back()))}));
    metadata.push_back(readables.back().metadata());
  }
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::byte> target(kSize);
      for (int n = 0; n < kReadsEach; ++n) {
        const int i = t * kReadsEach + n;
        std::fill(target.begin(), target.end(), std::byte{0});
        auto read = reader.begin_read(metadata[i], {Descriptor(std::span(target))});
        try {
          if (read.wait_for_completion(10s) != OperationStatus::Complete || target != sources[i])
            ++wrong;
        } catch (const Error&) {
          ++wrong;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  for (auto& readable : readables)
    EXPECT_EQ(readable.wait_for_completion(5s), OperationStatus::Complete);
}

INSTANTIATE_TEST_SUITE_P(Transports, ManyWaiters, ::testing::Values("tcp", "shm"),
                         [](const auto& info) { return info.param; });
