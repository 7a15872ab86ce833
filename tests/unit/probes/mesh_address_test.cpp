// The mesh address exchange: a real Responder on loopback, on a device that does not exist (the
// exchange allocates nothing, so it needs none), asked by fetch_mesh_endpoint.
#include <gtest/gtest.h>

#include <chrono>

#include "ibprobe/mesh_pinger.h"
#include "ibprobe/verbs_probe.h"
#include "peer_auth.h"
#include "raw_peer.h"

namespace ibprobe::probes {
namespace {

using raw_peer::kSecret;

MeshEndpoint some_endpoint() {
  MeshEndpoint endpoint;
  endpoint.gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 7, 2};
  endpoint.qpn = 0x1234;
  endpoint.qkey = UdPinger::kDefaultQkey;
  endpoint.gid_family = "ipv4";
  return endpoint;
}

std::unique_ptr<Responder> responder(const std::string& secret,
                                     std::optional<MeshEndpoint> endpoint) {
  return std::make_unique<Responder>(
      "127.0.0.1", "0", LocalPort{"no_such_rdma_device", 1},
      ResponderOptions{Limits{}, secret, nullptr, std::move(endpoint)});
}

std::expected<MeshEndpoint, Error> fetch(const Responder& from, const std::string& secret) {
  return fetch_mesh_endpoint("127.0.0.1", std::to_string(from.port()), secret,
                             std::chrono::steady_clock::now() + std::chrono::seconds(5));
}

// The failure kind and text of a fetch that must fail.
std::pair<FailureKind, std::string> refusal(const Responder& from, const std::string& secret) {
  const auto fetched = fetch(from, secret);
  if (!fetched) return {fetched.error().kind, fetched.error().message};
  ADD_FAILURE() << "the fetch succeeded";
  return {FailureKind::kInternal, ""};
}

TEST(MeshAddress, TheResponderTellsItsEndpoint) {
  const auto open = responder("", some_endpoint());
  EXPECT_EQ(fetch(*open, ""), some_endpoint());
  const auto guarded = responder(kSecret, some_endpoint());
  EXPECT_EQ(fetch(*guarded, kSecret), some_endpoint());
}

TEST(MeshAddress, AnInitiatorWithoutTheSecretLearnsNothing) {
  const auto guarded = responder(kSecret, some_endpoint());
  EXPECT_EQ(refusal(*guarded, "").first, FailureKind::kUnauthorized);
  EXPECT_EQ(refusal(*guarded, "a different secret, just as long").first,
            FailureKind::kUnauthorized);
}

TEST(MeshAddress, AResponderWithoutTheMeshSaysSo) {
  const auto plain = responder("", std::nullopt);
  const auto [kind, text] = refusal(*plain, "");
  EXPECT_EQ(kind, FailureKind::kRejected);
  EXPECT_NE(text.find("the mesh is off on this exporter"), std::string::npos) << text;
}

TEST(MeshAddress, AProbeRequestsProofIsNoMeshProof) {
  const auto mine = peer_auth::nonce();
  const auto theirs = peer_auth::nonce();
  EXPECT_NE(peer_auth::initiator_mesh_proof(kSecret, mine, theirs),
            peer_auth::initiator_proof(kSecret, mine, theirs,
                                       default_spec(Operation::kWrite, TestKind::kLatency)));
  EXPECT_NE(peer_auth::initiator_mesh_proof(kSecret, mine, theirs),
            peer_auth::responder_proof(kSecret, mine, theirs));
}

}  // namespace
}  // namespace ibprobe::probes
