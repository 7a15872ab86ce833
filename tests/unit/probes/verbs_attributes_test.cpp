// The attributes the probes hand to libibverbs, built without a device: the RTR path and the
// address vector (where --dlid replaces the LID the peer announced), and the atomics check.
#include <gtest/gtest.h>

#include <cstring>

#include "verbs.h"

namespace ibprobe::probes::verbs {
namespace {

constexpr std::uint8_t kPortNumber = 1;

PortFacts infiniband_port() {
  PortFacts port;
  port.attr.lid = 3;
  return port;
}

PortFacts roce_port() {
  PortFacts port;
  port.is_ethernet = true;
  port.gid_index = 1;
  return port;
}

RcPeer peer_at_lid(std::uint16_t lid) {
  RcPeer peer;
  peer.qpn = 0x1a2b;
  peer.psn = 0x123456;
  peer.lid = lid;
  peer.gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 99, 0, 1};
  peer.path_mtu = IBV_MTU_2048;
  return peer;
}

TEST(RtrAttributes, InfinibandSendsToThePeersLidWithoutAGrh) {
  const ibv_qp_attr attr = rtr_attributes(infiniband_port(), kPortNumber, peer_at_lid(7), {});
  EXPECT_EQ(attr.qp_state, IBV_QPS_RTR);
  EXPECT_EQ(attr.dest_qp_num, 0x1a2bu);
  EXPECT_EQ(attr.rq_psn, 0x123456u);
  EXPECT_EQ(attr.path_mtu, IBV_MTU_2048);
  EXPECT_EQ(attr.ah_attr.dlid, 7);
  EXPECT_EQ(attr.ah_attr.port_num, kPortNumber);
  EXPECT_EQ(attr.ah_attr.is_global, 0);
}

TEST(RtrAttributes, ADlidReplacesThePeersLid) {
  const AddressLane lane{.sl = 3, .traffic_class = 0, .dlid = 0x12};
  const ibv_qp_attr attr = rtr_attributes(infiniband_port(), kPortNumber, peer_at_lid(7), lane);
  EXPECT_EQ(attr.ah_attr.dlid, 0x12);
  EXPECT_EQ(attr.ah_attr.sl, 3);
  // Only the LID changes: the QP, the PSN and the MTU are still the peer's.
  EXPECT_EQ(attr.dest_qp_num, 0x1a2bu);
  EXPECT_EQ(attr.rq_psn, 0x123456u);
  EXPECT_EQ(attr.path_mtu, IBV_MTU_2048);
  EXPECT_EQ(attr.ah_attr.is_global, 0);
}

TEST(AddressVector, AUdAddressHandleTakesTheDlidToo) {
  const ibv_ah_attr ah = address_vector(infiniband_port(), kPortNumber, peer_at_lid(7),
                                        AddressLane{.sl = 0, .traffic_class = 0, .dlid = 0xbfff});
  EXPECT_EQ(ah.dlid, 0xbfff);
  EXPECT_EQ(address_vector(infiniband_port(), kPortNumber, peer_at_lid(7), {}).dlid, 7);
}

TEST(AddressVector, RoceRoutesByGidWithTheTrafficClass) {
  const RcPeer peer = peer_at_lid(0);
  const ibv_ah_attr ah =
      address_vector(roce_port(), kPortNumber, peer, AddressLane{.sl = 0, .traffic_class = 106});
  EXPECT_EQ(ah.is_global, 1);
  EXPECT_EQ(ah.grh.traffic_class, 106);
  EXPECT_EQ(ah.grh.sgid_index, 1);
  EXPECT_EQ(std::memcmp(ah.grh.dgid.raw, peer.gid.data(), peer.gid.size()), 0);
}

TEST(CheckAtomics, RefusesADeviceWithoutAtomics) {
  ibv_device_attr attr{};
  attr.atomic_cap = IBV_ATOMIC_NONE;
  const auto refused = check_atomics(attr, "siw0");
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error(), "siw0 does not execute atomic operations (atomic_cap NONE)");
}

TEST(CheckAtomics, AcceptsHcaAndGlobalAtomics) {
  ibv_device_attr attr{};
  attr.atomic_cap = IBV_ATOMIC_HCA;
  EXPECT_TRUE(check_atomics(attr, "rxe0").has_value());
  attr.atomic_cap = IBV_ATOMIC_GLOB;
  EXPECT_TRUE(check_atomics(attr, "mlx5_0").has_value());
}

}  // namespace
}  // namespace ibprobe::probes::verbs
