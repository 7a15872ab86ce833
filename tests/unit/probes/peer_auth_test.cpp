// Peer authentication of the control protocol: a real Responder on loopback with a port on a
// device that does not exist. The handshake completes before any device is opened, so a run that
// passes authentication fails on the device, and one that does not fails as unauthorized.
#include "peer_auth.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "ibprobe/verbs_probe.h"
#include "protocol.h"
#include "raw_peer.h"
#include "violations.h"

namespace ibprobe::probes {
namespace {

using protocol::Bytes;

using raw_peer::kMissingDevice;
using raw_peer::kSecret;
using raw_peer::read_frame;
using raw_peer::write_all;

ProbeSpec quick_spec() {
  return raw_peer::write_bw_spec(3);
}

struct Outcome {
  std::string kind;
  std::string what;
};

Outcome run_against(const Responder& responder, const std::string& secret,
                    const ProbeSpec& spec = quick_spec()) {
  RunOptions options;
  options.shared_secret = secret;
  const auto ran = run_probe(LocalPort{kMissingDevice, 1}, "127.0.0.1",
                             std::to_string(responder.port()), valid(spec), options);
  if (ran) return {"none", "the run succeeded"};
  return {std::string(to_string(ran.error().kind)), ran.error().message};
}

std::unique_ptr<Responder> responder_with(const std::string& secret) {
  return std::make_unique<Responder>("127.0.0.1", "0", LocalPort{kMissingDevice, 1},
                                     ResponderOptions{Limits{}, secret, nullptr});
}

// Opening the device fails by its name, or earlier when this host has no verbs support at all.
bool about_the_device(const std::string& text) {
  return text.find(kMissingDevice) != std::string::npos ||
         text.find("ibv_get_device_list") != std::string::npos;
}

bool failed_on_the_device(const Outcome& outcome) {
  return outcome.kind != "unauthorized" && outcome.kind != "none" && about_the_device(outcome.what);
}

TEST(PeerAuth, MatchingSecretsGetPastTheHandshake) {
  const auto responder = responder_with(kSecret);
  const auto outcome = run_against(*responder, kSecret);
  EXPECT_TRUE(failed_on_the_device(outcome)) << outcome.kind << ": " << outcome.what;
}

TEST(PeerAuth, NoSecretOnEitherSideGetsPastTheHandshake) {
  const auto responder = responder_with("");
  const auto outcome = run_against(*responder, "");
  EXPECT_TRUE(failed_on_the_device(outcome)) << outcome.kind << ": " << outcome.what;
}

TEST(PeerAuth, ResponderRefusesAnInitiatorWithoutTheSecret) {
  const auto responder = responder_with(kSecret);
  const auto outcome = run_against(*responder, "");
  EXPECT_EQ(outcome.kind, "unauthorized") << outcome.what;
  EXPECT_FALSE(about_the_device(outcome.what)) << outcome.what;
}

TEST(PeerAuth, WrongSecretIsRefused) {
  const auto responder = responder_with(kSecret);
  const auto outcome = run_against(*responder, "a different secret, same length");
  EXPECT_EQ(outcome.kind, "unauthorized") << outcome.what;
}

TEST(PeerAuth, InitiatorRefusesAResponderWithoutTheSecret) {
  const auto responder = responder_with("");
  const auto outcome = run_against(*responder, kSecret);
  EXPECT_EQ(outcome.kind, "unauthorized") << outcome.what;
  EXPECT_NE(outcome.what.find("does not authenticate"), std::string::npos) << outcome.what;
}

// ------------------------------------------------------------------ speaking the protocol raw

class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = raw_peer::connect_to_loopback(port);
    if (fd_ < 0) throw std::runtime_error("connect failed");
  }
  ~RawConnection() { ::close(fd_); }
  void send(const protocol::Message& message) { write_all(fd_, protocol::encode(message)); }
  protocol::Message receive() { return read_frame(fd_); }

 private:
  int fd_ = -1;
};

// Connects and sends a Hello with `nonce`; returns the connection and the responder's Hello. The
// responder serves one run at a time and answers "busy" until the previous one has let go.
std::pair<std::unique_ptr<RawConnection>, protocol::Hello> hello_exchange(
    const Responder& responder, const Bytes& nonce) {
  for (int attempt = 0;; ++attempt) {
    auto connection = std::make_unique<RawConnection>(responder.port());
    connection->send(protocol::Hello{protocol::kProtocolVersion, "raw", nonce, std::nullopt});
    auto answer = connection->receive();
    if (auto* hello = std::get_if<protocol::Hello>(&answer)) {
      return {std::move(connection), std::move(*hello)};
    }
    const auto* error = std::get_if<protocol::Error>(&answer);
    if (!error || error->code != protocol::ErrorCode::kBusy || attempt == 50) {
      throw std::runtime_error("the responder did not answer the hello with its own");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// An initiator that holds the secret but sends `request_for(nonces...)` as its request.
protocol::Message request_answer(
    const Responder& responder,
    const std::function<protocol::ProbeRequest(const Bytes& mine, const Bytes& theirs)>&
        request_for) {
  const auto mine = peer_auth::nonce();
  auto [connection, hello] = hello_exchange(responder, mine);
  EXPECT_TRUE(peer_auth::same_proof(peer_auth::responder_proof(kSecret, mine, *hello.challenge),
                                    hello.challenge_response));
  connection->send(request_for(mine, *hello.challenge));
  return connection->receive();
}

std::string error_code_of(const protocol::Message& message) {
  const auto* error = std::get_if<protocol::Error>(&message);
  if (!error) return "not an error (message type " + std::to_string(message.index() + 1) + ")";
  return error->code == protocol::ErrorCode::kUnauthorized ? "unauthorized"
                                                           : "other: " + error->text;
}

TEST(PeerAuthRaw, ACorrectProofGetsToTheDevice) {
  const auto responder = responder_with(kSecret);
  const auto answer = request_answer(*responder, [](const Bytes& mine, const Bytes& theirs) {
    return protocol::ProbeRequest{quick_spec(),
                                  peer_auth::initiator_proof(kSecret, mine, theirs, quick_spec())};
  });
  const auto* error = std::get_if<protocol::Error>(&answer);
  ASSERT_NE(error, nullptr);
  EXPECT_NE(error->code, protocol::ErrorCode::kUnauthorized);
  EXPECT_TRUE(about_the_device(error->text)) << error->text;
}

TEST(PeerAuthRaw, AlteredSpecIsRefused) {
  const auto responder = responder_with(kSecret);
  const auto answer = request_answer(*responder, [](const Bytes& mine, const Bytes& theirs) {
    auto altered = quick_spec();
    altered.message_size *= 2;
    return protocol::ProbeRequest{altered,
                                  peer_auth::initiator_proof(kSecret, mine, theirs, quick_spec())};
  });
  EXPECT_EQ(error_code_of(answer), "unauthorized");
}

TEST(PeerAuthRaw, MissingProofIsRefused) {
  const auto responder = responder_with(kSecret);
  const auto answer = request_answer(*responder, [](const Bytes&, const Bytes&) {
    return protocol::ProbeRequest{quick_spec(), std::nullopt};
  });
  EXPECT_EQ(error_code_of(answer), "unauthorized");
}

TEST(PeerAuthRaw, ResponderProofIsNotAcceptedAsTheInitiators) {
  const auto responder = responder_with(kSecret);
  const auto answer = request_answer(*responder, [](const Bytes& mine, const Bytes& theirs) {
    return protocol::ProbeRequest{quick_spec(), peer_auth::responder_proof(kSecret, mine, theirs)};
  });
  EXPECT_EQ(error_code_of(answer), "unauthorized");
}

TEST(PeerAuthRaw, ProofFromAnEarlierConnectionIsNotReplayable) {
  const auto responder = responder_with(kSecret);
  Bytes recorded;
  request_answer(*responder, [&](const Bytes& mine, const Bytes& theirs) {
    recorded = peer_auth::initiator_proof(kSecret, mine, theirs, quick_spec());
    return protocol::ProbeRequest{quick_spec(), recorded};
  });
  const auto answer = request_answer(*responder, [&](const Bytes&, const Bytes&) {
    return protocol::ProbeRequest{quick_spec(), recorded};
  });
  EXPECT_EQ(error_code_of(answer), "unauthorized");
}

// A responder replaying what a real one said to an earlier initiator: the proof covered that
// initiator's nonce, not this one's.
TEST(PeerAuthRaw, InitiatorRefusesAReplayedResponderHello) {
  const auto real = responder_with(kSecret);
  const auto recorded = hello_exchange(*real, peer_auth::nonce()).second;
  raw_peer::FakeResponder fake([&](int fd) {
    try {
      read_frame(fd);
      write_all(fd, protocol::encode(recorded));
      read_frame(fd);  // the initiator hangs up instead of sending a request
    } catch (const std::exception&) {
    }
  });
  RunOptions options;
  options.shared_secret = kSecret;
  const auto ran = run_probe(LocalPort{kMissingDevice, 1}, "127.0.0.1", fake.port(),
                             valid(quick_spec()), options);
  ASSERT_FALSE(ran) << "the run succeeded";
  EXPECT_EQ(ran.error().kind, FailureKind::kUnauthorized) << ran.error().message;
}

// ------------------------------------------------------------------------------ the proofs

TEST(PeerAuthProofs, DependOnEveryInput) {
  const auto a = peer_auth::nonce(), b = peer_auth::nonce();
  ASSERT_EQ(a.size(), peer_auth::kNonceBytes);
  EXPECT_NE(a, b);
  const auto spec = quick_spec();
  auto other_spec = spec;
  other_spec.qps += 1;
  const auto proof = peer_auth::initiator_proof(kSecret, a, b, spec);
  EXPECT_EQ(proof.size(), 32u);
  EXPECT_EQ(proof, peer_auth::initiator_proof(kSecret, a, b, spec));
  EXPECT_NE(proof, peer_auth::initiator_proof("another secret of some length", a, b, spec));
  EXPECT_NE(proof, peer_auth::initiator_proof(kSecret, b, a, spec));
  EXPECT_NE(proof, peer_auth::initiator_proof(kSecret, a, b, other_spec));
  EXPECT_NE(peer_auth::responder_proof(kSecret, a, b), peer_auth::responder_proof(kSecret, b, a));
  EXPECT_TRUE(peer_auth::same_proof(proof, proof));
  EXPECT_FALSE(peer_auth::same_proof(proof, std::nullopt));
  EXPECT_FALSE(peer_auth::same_proof(proof, Bytes(proof.begin(), proof.end() - 1)));
}

TEST(PeerAuthProofs, AuthenticatorTravelsInTheRequestWithinBounds) {
  const protocol::ProbeRequest request{quick_spec(), Bytes(32, 0xab)};
  const auto decoded = protocol::decode(protocol::encode(request));
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(std::get<protocol::ProbeRequest>(*decoded), request);
  const protocol::ProbeRequest oversized{quick_spec(), Bytes(65, 0xab)};
  const auto refused = protocol::decode(protocol::encode(oversized));
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().kind, protocol::DecodeErrorKind::kOutOfRange);
}

// ------------------------------------------------------------------------------ secret files

class SecretFile : public ::testing::Test {
 protected:
  SecretFile() {
    dir_ = std::filesystem::temp_directory_path() /
           ("ibprobe_secret_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  ~SecretFile() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path write(const std::string& content) {
    const auto path = dir_ / "secret";
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }
  std::string refusal(const std::filesystem::path& path) {
    try {
      load_shared_secret(path);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "accepted";
  }
  std::filesystem::path dir_;
};

TEST_F(SecretFile, TrailingNewlineIsNotPartOfTheSecret) {
  EXPECT_EQ(load_shared_secret(write(std::string(kSecret) + "\n")), kSecret);
  EXPECT_EQ(load_shared_secret(write(std::string(kSecret) + "\r\n")), kSecret);
  EXPECT_EQ(load_shared_secret(write(kSecret)), kSecret);
}

TEST_F(SecretFile, UnusableFilesSayWhy) {
  EXPECT_NE(refusal(dir_ / "absent").find("does not exist"), std::string::npos);
  EXPECT_NE(refusal(dir_).find("not a regular file"), std::string::npos);
  EXPECT_NE(refusal(write("\n")).find("empty"), std::string::npos);
  EXPECT_NE(refusal(write("fifteen bytes!!\n")).find("16"), std::string::npos);
  EXPECT_EQ(refusal(write("sixteen bytes!!!\n")), "accepted");
  EXPECT_NE(refusal(write(std::string(kMaxSecretBytes + 1, 'x'))).find("longer"),
            std::string::npos);
}

}  // namespace
}  // namespace ibprobe::probes
