// One probe at a time per port, enforced on the responder side: an initiator that arrives while
// the port's gate is held (a run in progress, ours or a peer's) is told "busy" at once, with the
// Error frame intact, rather than left to time out in the listen backlog. The initiator asks
// again until its setup deadline, so a run that is just ending does not fail the next one.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "ibprobe/verbs_probe.h"
#include "raw_peer.h"
#include "violations.h"

namespace ibprobe::probes {
namespace {

using raw_peer::kMissingDevice;

struct Attempt {
  std::string kind;
  std::string what;
  double seconds = 0;
};

// `gate`: this side's port gate as held for the run (RunOptions::gate); null: none.
Attempt probe(const Responder& responder, ProbeGate::Held* gate = nullptr) {
  auto spec = default_spec(Operation::kWrite, TestKind::kLatency);
  spec.timeout_seconds = 2;  // also the setup deadline
  const auto start = std::chrono::steady_clock::now();
  Attempt attempt{"none", "the run succeeded"};
  RunOptions options;
  options.gate = gate;
  const auto ran = run_probe(LocalPort{kMissingDevice, 1}, "127.0.0.1",
                             std::to_string(responder.port()), valid(spec), options);
  if (!ran) attempt = {std::string(to_string(ran.error().kind)), ran.error().message};
  attempt.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return attempt;
}

bool failed_on_the_device(const Attempt& attempt) {
  return attempt.what.find(kMissingDevice) != std::string::npos ||
         attempt.what.find("ibv_get_device_list") != std::string::npos;
}

TEST(ResponderGate, BusyPortIsRefusedWithTheReasonUntilTheSetupDeadline) {
  auto gate = std::make_shared<ProbeGate>();
  Responder responder("127.0.0.1", "0", LocalPort{kMissingDevice, 1},
                      ResponderOptions{Limits{}, "", gate});
  ASSERT_TRUE(gate->try_enter());  // a run of our own holds the port
  const auto attempt = probe(responder);
  EXPECT_EQ(attempt.kind, "rejected") << attempt.what;
  EXPECT_NE(attempt.what.find("busy: another probe is running on no_such_rdma_device port 1"),
            std::string::npos)
      << attempt.what;
  // Asked again while the deadline allowed, then gave up at it rather than hanging on.
  EXPECT_GT(attempt.seconds, 1.0);
  EXPECT_LT(attempt.seconds, 3.0);
  gate->leave();
}

TEST(ResponderGate, RunProceedsOnceThePortIsFree) {
  auto gate = std::make_shared<ProbeGate>();
  Responder responder("127.0.0.1", "0", LocalPort{kMissingDevice, 1},
                      ResponderOptions{Limits{}, "", gate});
  ASSERT_TRUE(gate->try_enter());
  std::thread release([&gate] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    gate->leave();
  });
  // Busy at first; once the gate is free the run gets past it and fails only on the device.
  const auto attempt = probe(responder);
  release.join();
  EXPECT_EQ(attempt.what.find("busy"), std::string::npos) << attempt.what;
  EXPECT_TRUE(failed_on_the_device(attempt)) << attempt.kind << ": " << attempt.what;
  // The responder left the gate when that run ended.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  bool entered = false;
  while (!(entered = gate->try_enter()) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(entered);
}

// Both ends of a link probing each other at once (both alerting): each initiator holds its own
// port's gate for its run, and each responder answers the other "busy". An initiator told so lets
// its gate go between its tries, so each is served by the other in turn, and both get past the
// handshake (here to fail on the missing device) long before their deadline, instead of both
// waiting "busy" until it.
TEST(ResponderGate, TwoHostsProbingEachOtherAtOnceAreEachServed) {
  auto gate_a = std::make_shared<ProbeGate>();
  auto gate_b = std::make_shared<ProbeGate>();
  Responder responder_a("127.0.0.1", "0", LocalPort{kMissingDevice, 1},
                        ResponderOptions{Limits{}, "", gate_a});
  Responder responder_b("127.0.0.1", "0", LocalPort{kMissingDevice, 1},
                        ResponderOptions{Limits{}, "", gate_b});
  const auto far = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  auto held_a = gate_a->enter({}, far);
  auto held_b = gate_b->enter({}, far);
  ASSERT_TRUE(held_a && held_b);
  // Each run ends as the exporter's does: its gate let go once the run returns, after checking
  // that the run returned holding it.
  struct Side {
    Attempt attempt;
    bool held_at_the_end = false;
  };
  const auto run = [](const Responder& peer, ProbeGate& gate, std::optional<ProbeGate::Held>& held,
                      Side& side) {
    side.attempt = probe(peer, &*held);
    side.held_at_the_end = !gate.try_enter();
    if (!side.held_at_the_end) gate.leave();
    held.reset();
  };
  Side a, b;
  std::thread thread_a([&] { run(responder_b, *gate_a, held_a, a); });
  std::thread thread_b([&] { run(responder_a, *gate_b, held_b, b); });
  thread_a.join();
  thread_b.join();
  for (const auto* side : {&a, &b}) {
    EXPECT_EQ(side->attempt.what.find("busy"), std::string::npos) << side->attempt.what;
    EXPECT_TRUE(failed_on_the_device(side->attempt))
        << side->attempt.kind << ": " << side->attempt.what;
    EXPECT_LT(side->attempt.seconds, 1.5) << side->attempt.what;
    EXPECT_TRUE(side->held_at_the_end);
  }
  // Let go once each: free once the responders' runs have ended too, then taken by one alone.
  for (auto* gate : {gate_a.get(), gate_b.get()}) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    bool entered = false;
    while (!(entered = gate->try_enter()) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(entered);
    EXPECT_FALSE(gate->try_enter());
    gate->leave();
  }
}

// Stepping aside, the initiator may find its port taken past its deadline: the run fails as a
// timeout, and the gate is left to whoever took it (the initiator's hold ends, it is not let go
// twice).
TEST(ResponderGate, AGateTakenWhileSteppingAsideFailsTheRunAtItsDeadline) {
  auto gate_b = std::make_shared<ProbeGate>();
  Responder responder_b("127.0.0.1", "0", LocalPort{kMissingDevice, 1},
                        ResponderOptions{Limits{}, "", gate_b});
  ASSERT_TRUE(gate_b->try_enter());  // B is busy for good
  ProbeGate gate_a;
  auto held_a = gate_a.enter({}, std::chrono::steady_clock::now() + std::chrono::seconds(5));
  ASSERT_TRUE(held_a);
  std::atomic<bool> taken = false;
  std::thread peer_run([&] {
    // A peer's run on A's responder, taken as soon as A steps aside, held past A's deadline.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!(taken = gate_a.try_enter()) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (taken) {
      std::this_thread::sleep_for(std::chrono::seconds(3));
      gate_a.leave();
    }
  });
  const auto attempt = probe(responder_b, &*held_a);
  peer_run.join();
  ASSERT_TRUE(taken);
  EXPECT_EQ(attempt.kind, "timeout") << attempt.what;
  EXPECT_NE(attempt.what.find("this side's port stayed busy with a peer's probe"),
            std::string::npos)
      << attempt.what;
  held_a.reset();  // holds nothing: the peer's run let the gate go
  EXPECT_TRUE(gate_a.try_enter());
  EXPECT_FALSE(gate_a.try_enter());
  gate_a.leave();
  gate_b->leave();
}

}  // namespace
}  // namespace ibprobe::probes

namespace ibprobe::probes {
namespace {

// A client that connects while the port is busy and never stops sending: the responder's
// refusal must not keep reading it, or no other initiator would be answered.
TEST(ResponderGate, AClientThatKeepsSendingCannotHoldTheBusyRefusal) {
  auto gate = std::make_shared<ProbeGate>();
  Responder responder("127.0.0.1", "0", LocalPort{kMissingDevice, 1},
                      ResponderOptions{Limits{}, "", gate});
  ASSERT_TRUE(gate->try_enter());
  const int flood = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(flood, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(responder.port()));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(flood, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  std::atomic<bool> stop = false;
  std::thread sender([&] {
    const std::vector<char> junk(256, 'x');
    while (!stop && ::send(flood, junk.data(), junk.size(), MSG_NOSIGNAL) > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // A second initiator is still told "busy" at once, while the first one goes on sending.
  const auto attempt = probe(responder);
  stop = true;
  sender.join();
  ::close(flood);
  EXPECT_EQ(attempt.kind, "rejected") << attempt.what;
  EXPECT_NE(attempt.what.find("busy"), std::string::npos) << attempt.what;
  gate->leave();
}

}  // namespace
}  // namespace ibprobe::probes

namespace ibprobe::probes {
namespace {

// A fabric port that is not LID:PORT is refused before anything is asked of the peer: here,
// before the connection that would find nobody listening.
TEST(RunProbe, FabricPortsAreParsedBeforeTheHandshake) {
  const int probe_socket = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(probe_socket, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  socklen_t length = sizeof(address);
  ::getsockname(probe_socket, reinterpret_cast<sockaddr*>(&address), &length);
  const auto unused_port = std::to_string(ntohs(address.sin_port));
  ::close(probe_socket);  // bound, never listening: a connect would be refused
  RunOptions options;
  options.fabric_ports = {"0x12:3", "switch-7"};
  const auto ran = run_probe(LocalPort{kMissingDevice, 1}, "127.0.0.1", unused_port,
                             valid(default_spec(Operation::kWrite, TestKind::kBandwidth)), options);
  ASSERT_FALSE(ran) << "the run went on";
  // Refused before the peer is reached: reaching it would have been kUnreachable.
  EXPECT_EQ(ran.error().kind, FailureKind::kRejected) << ran.error().message;
  EXPECT_NE(ran.error().message.find("fabric port 'switch-7' is not LID:PORT"), std::string::npos)
      << ran.error().message;
}

}  // namespace
}  // namespace ibprobe::probes
