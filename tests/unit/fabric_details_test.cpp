// Which detail attributes a switch port's read asks, from what was kept and the base counters
// just read, and how long the kept state lives.
#include <gtest/gtest.h>

#include "detail_memory.h"

namespace ibprobe::fabric {
namespace {

constexpr std::size_t kRcv = 0;      // PortRcvErrorDetails: port_rcv_errors
constexpr std::size_t kDiscard = 1;  // PortXmitDiscardDetails: port_xmit_discards
constexpr std::size_t kWait = 2;     // PortVLXmitWaitCounters: port_xmit_wait

CounterMap bases(std::uint64_t rcv, std::uint64_t discards, std::optional<std::uint64_t> wait) {
  CounterMap now{{"port_rcv_errors", {rcv, 16}},
                 {"port_xmit_discards", {discards, 16}},
                 {"symbol_error", {7, 16}}};
  if (wait) now.emplace("port_xmit_wait", RemoteCounter{*wait, 32});
  return now;
}

// What a read at these base counters would have kept.
PortDetails kept_at(std::uint64_t rcv, std::uint64_t discards, std::optional<std::uint64_t> wait) {
  PortDetails kept;
  kept[kRcv] = KeptDetail{rcv, {{"port_local_physical_errors", {rcv, 16}}}};
  kept[kDiscard] = KeptDetail{discards, {{"port_inactive_discards", {discards, 16}}}};
  kept[kWait] = KeptDetail{wait, {{"port_vl_xmit_wait_0", {wait.value_or(0), 16}}}};
  return kept;
}

TEST(FabricDetails, AFirstReadAsksEveryAttribute) {
  EXPECT_EQ(details_to_read(PortDetails{}, bases(0, 0, 0)), (DetailChoice{true, true, true}));
}

TEST(FabricDetails, NothingMovedAsksNothing) {
  EXPECT_EQ(details_to_read(kept_at(3, 4, 500), bases(3, 4, 500)),
            (DetailChoice{false, false, false}));
  // Counters the details do not split may move as they like.
  auto now = bases(3, 4, 500);
  now["symbol_error"].value = 9000;
  now.emplace("port_xmit_data", RemoteCounter{123456789, 64});
  EXPECT_EQ(details_to_read(kept_at(3, 4, 500), now), (DetailChoice{false, false, false}));
}

TEST(FabricDetails, OnlyTheAttributeWhoseBaseMovedIsAsked) {
  EXPECT_EQ(details_to_read(kept_at(3, 4, 500), bases(5, 4, 500)),
            (DetailChoice{true, false, false}));
  EXPECT_EQ(details_to_read(kept_at(3, 4, 500), bases(3, 9, 500)),
            (DetailChoice{false, true, false}));
  EXPECT_EQ(details_to_read(kept_at(3, 4, 500), bases(3, 4, 501)),
            (DetailChoice{false, false, true}));
  EXPECT_EQ(details_to_read(kept_at(3, 4, 500), bases(4, 5, 501)),
            (DetailChoice{true, true, true}));
}

TEST(FabricDetails, ABaseCounterGoingDownIsAResetAndAsksAll) {
  EXPECT_EQ(details_to_read(kept_at(3, 4, 500), bases(0, 4, 500)),
            (DetailChoice{true, true, true}));
  EXPECT_EQ(details_to_read(kept_at(3, 4, 500), bases(3, 4, 20)), (DetailChoice{true, true, true}));
}

TEST(FabricDetails, ALostOrUnsupportedAttributeIsAskedAgain) {
  auto kept = kept_at(3, 4, 500);
  kept[kDiscard].reset();
  EXPECT_EQ(details_to_read(kept, bases(3, 4, 500)), (DetailChoice{false, true, false}));
}

TEST(FabricDetails, ASaturatedBaseHidesMovementSoItsAttributeIsAskedEveryTime) {
  EXPECT_EQ(details_to_read(kept_at(65535, 4, 500), bases(65535, 4, 500)),
            (DetailChoice{true, false, false}));
  EXPECT_EQ(details_to_read(kept_at(3, 4, 0xFFFFFFFF), bases(3, 4, 0xFFFFFFFF)),
            (DetailChoice{false, false, true}));
}

TEST(FabricDetails, AnUnfilledBaseAsksItsAttributeEveryTime) {
  // PortXmitWait of a PMA without the PortXmitWait capability is dropped before the decision.
  EXPECT_EQ(details_to_read(kept_at(3, 4, std::nullopt), bases(3, 4, std::nullopt)),
            (DetailChoice{false, false, true}));
  // ... and one that was not filled when the details were kept is no base to compare with.
  EXPECT_EQ(details_to_read(kept_at(3, 4, std::nullopt), bases(3, 4, 500)),
            (DetailChoice{false, false, true}));
}

TEST(FabricDetails, TheMemoryKeepsOnlyPortsOfTheModel) {
  FabricModel model;
  FabricNode leaf;
  leaf.guid = 0x10;
  leaf.type = FabricNodeType::kSwitch;
  leaf.ports.resize(2);
  leaf.ports[0].number = 1;
  leaf.ports[1].number = 2;
  model.nodes.push_back(leaf);
  DetailMemory memory;
  memory[{0x10, 1}] = kept_at(1, 1, 1);
  memory[{0x10, 2}] = kept_at(2, 2, 2);
  memory[{0x10, 3}] = kept_at(3, 3, 3);  // a port the switch no longer reports
  memory[{0x20, 1}] = kept_at(4, 4, 4);  // a switch that vanished
  keep_model_ports(memory, model);
  ASSERT_EQ(memory.size(), 2u);
  EXPECT_TRUE(memory.contains({0x10, 1}));
  EXPECT_TRUE(memory.contains({0x10, 2}));
  // The vanished switch's port, back in a later model, starts with nothing kept: read in full.
  EXPECT_EQ(details_to_read(memory[{0x20, 1}], bases(4, 4, 4)), (DetailChoice{true, true, true}));
}

}  // namespace
}  // namespace ibprobe::fabric
