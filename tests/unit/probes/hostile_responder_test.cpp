// The initiator against responders that misbehave: every case must end in a ProbeFailure that
// says what went wrong, quickly, before any verbs resource is created (these run without RDMA
// hardware).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "ibprobe/mesh_pinger.h"
#include "ibprobe/verbs_probe.h"
#include "protocol.h"
#include "raw_peer.h"
#include "violations.h"

namespace ibprobe::probes {
namespace {

using raw_peer::FakeResponder;
using raw_peer::read_frame;
using raw_peer::write_all;

using protocol::Bytes;

void handshake(int fd) {
  EXPECT_TRUE(std::holds_alternative<protocol::Hello>(read_frame(fd)));
  write_all(fd, protocol::encode(protocol::Hello{protocol::kProtocolVersion, "fake", {}, {}}));
}

ProbeSpec short_timeout_spec() {
  return raw_peer::write_bw_spec(2);
}

struct Failure {
  std::string what;
  std::string kind;
  double seconds = 0;
};

// Runs a probe against the fake responder; returns the failure, its class and how long it took.
Failure probe_failure(FakeResponder& responder, const ProbeSpec& spec = short_timeout_spec()) {
  const auto start = std::chrono::steady_clock::now();
  Failure failure{"no failure", "none"};
  const auto ran =
      run_probe(LocalPort{"no_such_device", 1}, "127.0.0.1", responder.port(), valid(spec));
  if (!ran) failure = {ran.error().message, std::string(to_string(ran.error().kind))};
  failure.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return failure;
}

TEST(HostileResponder, OversizedFrameIsRefusedFromItsHeader) {
  FakeResponder responder([](int fd) {
    read_frame(fd);
    // A valid header announcing a 1 GiB body: refused before anything is read or allocated.
    Bytes header = {'I', 'B', 'P', 'R', 0, 1, 0, 1, 0x40, 0, 0, 0};
    write_all(fd, header);
  });
  const auto failure = probe_failure(responder);
  EXPECT_NE(failure.what.find("bad frame"), std::string::npos) << failure.what;
  EXPECT_EQ(failure.kind, "protocol");
  EXPECT_LT(failure.seconds, 2);
}

TEST(HostileResponder, GarbageIsNotAFrame) {
  FakeResponder responder([](int fd) {
    read_frame(fd);
    write_all(fd, Bytes{'H', 'T', 'T', 'P', '/', '1', '.', '1', ' ', '2', '0', '0'});
  });
  const auto failure = probe_failure(responder);
  EXPECT_NE(failure.what.find("bad frame"), std::string::npos) << failure.what;
  EXPECT_EQ(failure.kind, "protocol");
}

// A responder of another protocol version is refused by every exchange, before anything else is
// said: a probe run and a mesh address request alike.
TEST(HostileResponder, AnotherProtocolVersionIsRefusedByEveryExchange) {
  const auto next = static_cast<std::uint16_t>(protocol::kProtocolVersion + 1);
  const auto other_version = [next](int fd) {
    EXPECT_TRUE(std::holds_alternative<protocol::Hello>(read_frame(fd)));
    // Its Hello as such a responder frames it: the version in the frame header and the body.
    Bytes hello = protocol::encode(protocol::Hello{next, "fake", {}, {}});
    hello[4] = static_cast<std::uint8_t>(next >> 8);
    hello[5] = static_cast<std::uint8_t>(next & 0xff);
    write_all(fd, hello);
  };
  const std::string said = "peer speaks protocol version " + std::to_string(next) +
                           ", this build speaks " + std::to_string(protocol::kProtocolVersion);
  FakeResponder for_probe(other_version);
  const auto failure = probe_failure(for_probe);
  EXPECT_THAT(failure.what, ::testing::HasSubstr(said));
  EXPECT_EQ(failure.kind, "protocol");
  FakeResponder for_mesh(other_version);
  const auto fetched = fetch_mesh_endpoint(
      "127.0.0.1", for_mesh.port(), "", std::chrono::steady_clock::now() + std::chrono::seconds(5));
  ASSERT_FALSE(fetched.has_value())
      << "the mesh address was taken from a responder of another version";
  EXPECT_THAT(fetched.error().message, ::testing::HasSubstr(said));
  EXPECT_EQ(fetched.error().kind, FailureKind::kProtocol);
}

// The initiator's probe request answered with frames it must refuse, after a sound handshake.
struct AnswerCase {
  const char* name;
  std::vector<Bytes> replies;
  std::vector<std::string> said;  // each in the failure's message
  std::string kind;
};

// Test listings name the case rather than dump its bytes.
void PrintTo(const AnswerCase& answer, std::ostream* os) {
  *os << answer.name;
}

// A QPN beyond 24 bits, hand-built so that the encoder's checks do not interfere.
Bytes qp_info_with_out_of_range_qpn() {
  const std::string body = R"({"qps":[{"qpn":4294967295,"psn":1,"lid":0,)"
                           R"("gid":"00000000000000000000ffff0a630001","rkey":1,"addr":1,)"
                           R"("mtu":1024}]})";
  Bytes frame = {'I', 'B', 'P', 'R', 0, 1, 0, 5, 0, 0, 0, static_cast<std::uint8_t>(body.size())};
  for (char c : body) frame.push_back(static_cast<std::uint8_t>(c));
  return frame;
}

Bytes qp_info_offering(std::size_t qps) {
  protocol::QpInfo info;
  info.qps.resize(qps, protocol::QpEndpoint{1, 1, 0, {}, 1, 1, 1024});
  return protocol::encode(info);
}

std::vector<AnswerCase> answer_cases() {
  const Bytes accept = protocol::encode(protocol::ProbeAccept{});
  return {
      {"OutOfRangeNumbersAreRejected",
       {accept, qp_info_with_out_of_range_qpn()},
       {"bad message", "qpn"},
       "protocol"},
      {"WrongQpCountIsRefusedBeforeAllocating",
       {accept, qp_info_offering(8)},
       {"offered 8 QPs for a probe with 1"},
       "protocol"},
      {"RejectionCarriesTheReason",
       {protocol::encode(protocol::ProbeReject{"message_size above 8 MiB"})},
       {"rejected the probe: message_size above 8 MiB"},
       "rejected"},
      {"ErrorCarriesTheText",
       {protocol::encode(protocol::Error{protocol::ErrorCode::kBusy, "busy probing"})},
       {"reported an error: busy probing"},
       "rejected"},
  };
}

class HostileAnswer : public ::testing::TestWithParam<AnswerCase> {};

TEST_P(HostileAnswer, FailsTheProbeSayingWhy) {
  const AnswerCase& answer = GetParam();
  FakeResponder responder([&answer](int fd) {
    handshake(fd);
    read_frame(fd);
    for (const auto& reply : answer.replies) write_all(fd, reply);
  });
  const auto failure = probe_failure(responder);
  for (const auto& text : answer.said) {
    EXPECT_NE(failure.what.find(text), std::string::npos) << failure.what;
  }
  EXPECT_EQ(failure.kind, answer.kind);
}

INSTANTIATE_TEST_SUITE_P(HostileResponder, HostileAnswer, ::testing::ValuesIn(answer_cases()),
                         [](const ::testing::TestParamInfo<AnswerCase>& info) {
                           return std::string(info.param.name);
                         });

TEST(HostileResponder, SilentPeerTimesOutWithinTheSpecTimeout) {
  FakeResponder responder([](int fd) {
    read_frame(fd);
    std::this_thread::sleep_for(std::chrono::seconds(3));
  });
  const auto failure = probe_failure(responder);
  EXPECT_NE(failure.what.find("timed out"), std::string::npos) << failure.what;
  EXPECT_EQ(failure.kind, "timeout");
  EXPECT_LT(failure.seconds, 2.9);
}

TEST(HostileResponder, ClosedConnectionMidHandshake) {
  FakeResponder responder([](int fd) { read_frame(fd); });
  const auto failure = probe_failure(responder);
  EXPECT_NE(failure.what.find("closed by"), std::string::npos) << failure.what;
  EXPECT_EQ(failure.kind, "peer_lost");
}

TEST(HostileResponder, NobodyListening) {
  int port = 0;
  {
    FakeResponder responder([](int) {});
    port = std::stoi(responder.port());
    // Connect once so the fake's accept returns and the port is free again.
    const int fd = raw_peer::connect_to_loopback(port);
    if (fd >= 0) ::close(fd);
  }
  const auto ran = run_probe(LocalPort{"no_such_device", 1}, "127.0.0.1", std::to_string(port),
                             valid(short_timeout_spec()));
  ASSERT_FALSE(ran) << "connected to nothing";
  EXPECT_NE(ran.error().message.find("cannot connect"), std::string::npos) << ran.error().message;
  EXPECT_EQ(ran.error().kind, FailureKind::kUnreachable);
}

// run_probe takes only a validated spec: an inconsistent one is refused before any connection.
TEST(HostileResponder, InvalidSpecFailsBeforeConnecting) {
  auto spec = short_timeout_spec();
  spec.mtu = 3000;
  const auto valid = validate(spec);
  ASSERT_FALSE(valid);
  EXPECT_THAT(valid.error().message(), ::testing::HasSubstr("mtu 3000 is not an IB MTU"));
}

}  // namespace
}  // namespace ibprobe::probes
