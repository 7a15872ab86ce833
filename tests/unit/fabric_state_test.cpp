// The state file (--fabric.state-file): a model and its cable memory survive the round trip,
// a cable missing before the save is still missing after the load, and every file that is not a
// saved state is refused with the path and the reason.
#include "fabric_state.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace ibprobe::fabric {
namespace {

// A leaf (0x10) with hosts 0x21 on port 1 and 0x22 on port 2, both cables at 4x EDR.
FabricModel two_hosts() {
  FabricModel model;
  FabricNode leaf;
  leaf.guid = 0x10;
  leaf.type = FabricNodeType::kSwitch;
  leaf.description = "leaf-01";
  leaf.lid = 3;
  leaf.port_count = 8;
  for (int number = 1; number <= 2; ++number) {
    FabricPort port;
    port.number = number;
    port.state = 4;
    port.width_lanes = 4;
    port.lane_gigabits = 25.78125;
    port.remote = FabricRemote{0x20u + static_cast<unsigned>(number),
                               "node-000" + std::to_string(number) + " mlx5_0", 1};
    leaf.ports.push_back(port);
  }
  model.nodes.push_back(leaf);
  model.discovered_at = std::chrono::system_clock::time_point(std::chrono::seconds(1767225600));
  return model;
}

class FabricStateFile : public ::testing::Test {
 protected:
  void SetUp() override {
    directory = std::filesystem::temp_directory_path() /
                ("ibprobe-state-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(directory);
    path = directory / "fabric.state";
  }
  void TearDown() override { std::filesystem::remove_all(directory); }
  void write(const std::string& text) { std::ofstream(path) << text; }
  std::string refusal() {
    const auto loaded = load_fabric_state(path);
    if (loaded) return "loaded";
    EXPECT_EQ(loaded.error().kind, ErrorKind::kStateFile);
    return loaded.error().message;
  }

  std::filesystem::path directory;
  std::filesystem::path path;
};

TEST_F(FabricStateFile, AMissingCableStaysMissingAcrossASaveAndALoad) {
  auto model = two_hosts();
  LinkHistory history;
  history.update(model);
  // Host 2's cable goes; the history remembers it as vanished.
  model.nodes[0].ports[1].remote.reset();
  ASSERT_EQ(history.update(model).size(), 1u);
  ASSERT_TRUE(save_fabric_state(path, fabric_state_to_json(model, history)));
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(path).concat(".tmp")));

  auto loaded = load_fabric_state(path);
  ASSERT_TRUE(loaded) << loaded.error().message;
  EXPECT_EQ(loaded->model.discovered_at, model.discovered_at);
  ASSERT_EQ(loaded->model.nodes.size(), 1u);
  EXPECT_EQ(loaded->model.nodes[0].description, "leaf-01");
  EXPECT_EQ(loaded->model.nodes[0].lid, 3);
  const auto& links = loaded->history.links();
  ASSERT_EQ(links.size(), 2u);
  const auto& gone = links.at({0x10, 2});
  EXPECT_FALSE(gone.present);
  EXPECT_EQ(gone.remote.guid, 0x22u);
  EXPECT_EQ(gone.remote.description, "node-0002 mlx5_0");
  EXPECT_EQ(gone.best_width_lanes, 4);
  EXPECT_EQ(gone.best_lane_gigabits, 25.78125);
  // The first discovery after the restart still lacks the cable: no change, still missing.
  EXPECT_TRUE(loaded->history.update(model).empty());
  EXPECT_FALSE(loaded->history.links().at({0x10, 2}).present);
  // It comes back at 4x SDR: returned and downgraded against the best it ran at before.
  model.nodes[0].ports[1].remote = FabricRemote{0x22, "node-0002 mlx5_0", 1};
  model.nodes[0].ports[1].lane_gigabits = 2.5;
  const auto changes = loaded->history.update(model);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].kind, LinkHistory::Change::Kind::kReturned);
  EXPECT_EQ(changes[1].kind, LinkHistory::Change::Kind::kDowngraded);
}

TEST_F(FabricStateFile, SavingReplacesTheFileWhole) {
  LinkHistory history;
  ASSERT_TRUE(save_fabric_state(path, "first"));
  ASSERT_TRUE(save_fabric_state(path, fabric_state_to_json(two_hosts(), history)));
  EXPECT_TRUE(load_fabric_state(path));
  const auto nowhere = directory / "no-such-directory" / "fabric.state";
  const auto refused = save_fabric_state(nowhere, "x");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message,
            "cannot create " + nowhere.string() + ".tmp: No such file or directory");
}

TEST_F(FabricStateFile, NamesWhyAFileIsNoSavedState) {
  const std::string prefix = "state file " + path.string() + ": ";
  write("");
  EXPECT_TRUE(refusal().starts_with(prefix + "not a saved fabric state: ")) << refusal();
  write("{\"nodes\": []}");
  EXPECT_EQ(refusal(),
            prefix + "not a saved fabric state (want \"format\": \"ibprobe-fabric-state-1\")");
  write("{\"format\": \"ibprobe-fabric-state-1\", \"discovered_at_ms\": 0, \"links\": []}");
  EXPECT_TRUE(refusal().starts_with(prefix + "not a saved fabric state: ")) << refusal();
  // A model whose node type is unknown: the discovery result's own refusal.
  write(
      "{\"format\": \"ibprobe-fabric-state-1\", \"discovered_at_ms\": 0, \"links\": [], \"model\": "
      "{\"mads\": 0, \"nodes\": [{\"guid\": 1, \"type\": \"hub\", \"description\": \"\", \"lid\": "
      "0, \"port_count\": 0, \"ports\": []}]}}");
  EXPECT_EQ(refusal(), prefix + "malformed discovery output: unknown node type \"hub\"");
  // Numbers that do not fit their fields.
  write(
      "{\"format\": \"ibprobe-fabric-state-1\", \"discovered_at_ms\": -5, \"links\": [], "
      "\"model\": {\"mads\": 0, \"nodes\": []}}");
  EXPECT_EQ(refusal(), prefix +
                           "not a saved fabric state: \"discovered_at_ms\" is not a time "
                           "between 1970 and 2255");
  write(
      "{\"format\": \"ibprobe-fabric-state-1\", \"discovered_at_ms\": 0, \"model\": "
      "{\"mads\": 0, \"nodes\": []}, \"links\": [{\"guid\": 1, \"port\": 1e300, "
      "\"remote_guid\": 2, \"remote_description\": \"h\", \"remote_port\": 1, "
      "\"best_width_lanes\": 4, \"best_lane_gigabits\": 2.5, \"present\": true, "
      "\"width_lanes\": 4, \"lane_gigabits\": 2.5}]}");
  EXPECT_EQ(refusal(), prefix + "not a saved fabric state: \"port\" is not an integer in range");
  // Truncated mid-way, as a crash without the atomic rename would leave it.
  LinkHistory history;
  const auto whole = fabric_state_to_json(two_hosts(), history);
  write(whole.substr(0, whole.size() / 2));
  EXPECT_TRUE(refusal().starts_with(prefix + "not a saved fabric state: ")) << refusal();
}

TEST_F(FabricStateFile, NamesWhyAFileCannotBeRead) {
  std::filesystem::create_directory(path);
  EXPECT_EQ(refusal(), "cannot read state file " + path.string() + ": Is a directory");
  std::filesystem::remove(path);
  EXPECT_EQ(refusal(), "cannot read state file " + path.string() + ": No such file or directory");
}

}  // namespace
}  // namespace ibprobe::fabric
