// The lane (sl, traffic_class, pkey_index, dlid): its ranges, the P_Key table and link layer
// checks against sysfs, and how it travels to the responder.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "ibprobe/probes.h"
#include "ibprobe/spec_json.h"
#include "protocol.h"
#include "round_trip.h"
#include "sysfs_fixture.h"
#include "violations.h"

namespace ibprobe::probes {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

ProbeSpec lane_spec() {
  return default_spec(Operation::kWrite, TestKind::kBandwidth);
}

TEST(Lane, DefaultsArePerftests) {
  for (auto operation : {Operation::kWrite, Operation::kRead, Operation::kSend}) {
    for (auto test : {TestKind::kBandwidth, TestKind::kLatency}) {
      const auto spec = default_spec(operation, test);
      EXPECT_EQ(spec.sl, 0u);
      EXPECT_EQ(spec.traffic_class, 0u);
      EXPECT_EQ(spec.pkey_index, 0u);
    }
  }
}

TEST(Lane, EdgesOfEachRangeAreValid) {
  ProbeSpec spec = lane_spec();
  spec.sl = 15;
  spec.traffic_class = 255;
  spec.pkey_index = 65535;
  EXPECT_THAT(violations_of(validate(spec)), IsEmpty());
  EXPECT_THAT(lane_problems(spec), IsEmpty());
}

TEST(Lane, EachValueOutOfRangeSaysWhy) {
  ProbeSpec spec = lane_spec();
  spec.sl = 16;
  EXPECT_THAT(violations_of(validate(spec)), ElementsAre("sl=16: a service level is 0..15"));
  spec = lane_spec();
  spec.traffic_class = 256;
  EXPECT_THAT(violations_of(validate(spec)),
              ElementsAre("traffic_class=256: a traffic class is one byte, 0..255 (on RoCE v2 "
                          "the IP TOS byte)"));
  spec = lane_spec();
  spec.pkey_index = 65536;
  EXPECT_THAT(violations_of(validate(spec)),
              ElementsAre("pkey_index=65536: a P_Key index is 0..65535"));
  spec.sl = 99;
  EXPECT_THAT(lane_problems(spec), ElementsAre("sl=99: a service level is 0..15",
                                               "pkey_index=65536: a P_Key index is 0..65535"));
}

TEST(Lane, TheDefaultLaneLeavesTheWireAsItWas) {
  // A plain spec's request carries no lane keys: a responder that predates lanes reads it as
  // before, byte for byte.
  const auto plain = spec_to_json(lane_spec());
  for (const char* key : {"sl", "traffic_class", "pkey_index"}) EXPECT_FALSE(plain.contains(key));
  ProbeSpec lane = lane_spec();
  lane.traffic_class = 106;
  const auto sent = spec_to_json(lane);
  EXPECT_EQ(sent.at("traffic_class"), 106);
  EXPECT_FALSE(sent.contains("sl"));
}

TEST(Lane, TravelsToTheResponderWithTheSpec) {
  ProbeSpec spec = lane_spec();
  spec.sl = 3;
  spec.traffic_class = 106;
  spec.pkey_index = 2;
  const protocol::ProbeRequest request{spec};
  EXPECT_EQ(std::get<protocol::ProbeRequest>(protocol::round_trip(request)), request);
  // Out of range on the wire: decoded, then refused by validate like any peer's spec.
  spec.sl = 40;
  const auto decoded =
      std::get<protocol::ProbeRequest>(protocol::round_trip(protocol::ProbeRequest{spec}));
  EXPECT_THAT(violations_of(validate(decoded.spec)),
              ElementsAre("sl=40: a service level is 0..15"));
}

class PkeyTable : public ::testing::Test {
 protected:
  void SetUp() override {
    // An IB port's table: the default partition, one more, then empty entries.
    const char* values[] = {"0xffff", "0x8001", "0x0000", "0x0000"};
    for (int i = 0; i < 4; ++i) {
      tree_.write("class/infiniband/mlx5_0/ports/1/pkeys/" + std::to_string(i), values[i]);
    }
  }
  ibprobe::testing::SysfsTree tree_;
  const std::filesystem::path& root_ = tree_.root();
};

TEST_F(PkeyTable, AnIndexHoldingAKeyPasses) {
  EXPECT_TRUE(check_pkey_index(root_, "mlx5_0", 1, 1).has_value());
}

TEST_F(PkeyTable, IndexZeroIsNotChecked) {
  // perftest's default: what a run without pkey_index always did, even on a port without sysfs.
  EXPECT_TRUE(check_pkey_index(root_, "nodev", 9, 0).has_value());
}

TEST_F(PkeyTable, AnEmptyEntryIsRefused) {
  EXPECT_EQ(check_pkey_index(root_, "mlx5_0", 1, 2).error(),
            "mlx5_0 port 1: pkey_index=2: entry 2 of the port's P_Key table is empty (P_Key "
            "0x0000 is invalid)");
}

TEST_F(PkeyTable, AnIndexBeyondTheTableIsRefused) {
  EXPECT_EQ(check_pkey_index(root_, "mlx5_0", 1, 7).error(),
            "mlx5_0 port 1: pkey_index=7: the port's P_Key table has 4 entries, no index 7");
}

TEST_F(PkeyTable, APortWithoutATableHasNoIndex) {
  EXPECT_EQ(check_pkey_index(root_, "mlx5_0", 2, 1).error(),
            "mlx5_0 port 2: pkey_index=1: the port's P_Key table has 0 entries, no index 1");
}

TEST(LanePkeyProblem, OneEntryTable) {
  // rxe's table: one entry.
  EXPECT_EQ(lane_pkey_problem(1, 1),
            "pkey_index=1: the port's P_Key table has 1 entry, no index 1");
}

TEST(Lane, ADestinationLidIsAUnicastLid) {
  // IBA 4.1.3: 0x0001..0xBFFF unicast, 0xC000..0xFFFE multicast, 0xFFFF permissive, 0 reserved.
  ProbeSpec spec = lane_spec();
  for (const std::uint32_t lid : {1u, 0xBFFFu}) {
    spec.dlid = lid;
    EXPECT_THAT(lane_problems(spec), IsEmpty()) << lid;
  }
  const char* why =
      ": a destination LID is a unicast LID, 1..49151 (0xBFFF); 0xC000 and above are multicast "
      "and permissive LIDs";
  for (const std::uint32_t lid : {0u, 0xC000u, 0xFFFFu, 70000u}) {
    spec.dlid = lid;
    EXPECT_THAT(violations_of(validate(spec)), ElementsAre("dlid=" + std::to_string(lid) + why))
        << lid;
  }
}

TEST(Lane, ADestinationLidTravelsOnlyWhenSet) {
  ProbeSpec spec = lane_spec();
  EXPECT_FALSE(spec_to_json(spec).contains("dlid"));
  spec.dlid = 0x12;
  EXPECT_EQ(spec_to_json(spec).at("dlid"), 0x12);
  const protocol::ProbeRequest request{spec};
  EXPECT_EQ(std::get<protocol::ProbeRequest>(protocol::round_trip(request)), request);
}

class LinkLayer : public ::testing::Test {
 protected:
  void SetUp() override {
    tree_.write("class/infiniband/mlx5_0/ports/1/link_layer", "InfiniBand");
    tree_.write("class/infiniband/rxe0/ports/1/link_layer", "Ethernet");
  }
  ibprobe::testing::SysfsTree tree_;
  const std::filesystem::path& root_ = tree_.root();
};

TEST_F(LinkLayer, ADestinationLidOnAnInfiniBandPortPasses) {
  EXPECT_TRUE(check_dlid(root_, "mlx5_0", 1, 0x12).has_value());
  EXPECT_TRUE(check_dlid(root_, "rxe0", 1, std::nullopt).has_value());
}

TEST_F(LinkLayer, ADestinationLidOnRoceIsRefused) {
  EXPECT_EQ(check_dlid(root_, "rxe0", 1, 5).error(),
            "rxe0 port 1: dlid=5: the port's link layer is Ethernet (RoCE): packets are routed by "
            "GID and a destination LID is never used");
}

TEST_F(LinkLayer, APortWhoseLinkLayerCannotBeReadIsRefused) {
  EXPECT_EQ(check_dlid(root_, "mlx5_0", 2, 5).error(),
            "mlx5_0 port 2: dlid=5: cannot read " +
                (root_ / "class/infiniband/mlx5_0/ports/2/link_layer").string() +
                " to tell whether the port routes by LID");
}

TEST_F(LinkLayer, TheLaneCheckAppliesBothPortChecks) {
  ProbeSpec spec = lane_spec();
  spec.dlid = 7;
  EXPECT_TRUE(check_lane_on_port(root_, "mlx5_0", 1, spec).has_value());
  EXPECT_FALSE(check_lane_on_port(root_, "rxe0", 1, spec).has_value());
  spec.dlid.reset();
  spec.pkey_index = 1;
  EXPECT_EQ(check_lane_on_port(root_, "mlx5_0", 1, spec).error(),
            "mlx5_0 port 1: pkey_index=1: the port's P_Key table has 0 entries, no index 1");
}

}  // namespace
}  // namespace ibprobe::probes
