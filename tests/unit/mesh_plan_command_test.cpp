#include "mesh_plan_command.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <vector>

namespace ibprobe::testing {
namespace {

class MeshPlanCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("ibprobe-mesh-plan-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    write("peers.json", R"([
      {"targets": ["a1:9470", "a2:9470"], "labels": {"tor": "leaf-a"}},
      {"targets": ["b1:9470", "b2:9470", "b3:9470", "b4:9470"], "labels": {"tor": "leaf-b"}}])");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const auto path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  // Runs the command line; returns the exit code, stdout lines parsed as JSON in `lines`.
  int run(std::vector<std::string> args) {
    args.insert(args.begin(), "ibprobe_exporter");
    std::vector<const char*> argv;
    for (const auto& arg : args) argv.push_back(arg.c_str());
    exporter::Config config;
    if (const auto code =
            exporter::parse_flags(static_cast<int>(argv.size()), argv.data(), config)) {
      return *code;
    }
    EXPECT_TRUE(config.mesh_plan);
    std::ostringstream out;
    const int code = exporter::run_mesh_plan(config, out, err_);
    lines.clear();
    std::istringstream text(out.str());
    for (std::string line; std::getline(text, line);)
      lines.push_back(nlohmann::ordered_json::parse(line));
    return code;
  }

  std::string peers() const { return "--mesh.peers-file=" + (dir_ / "peers.json").string(); }

  std::filesystem::path dir_;
  std::ostringstream err_;
  std::vector<nlohmann::ordered_json> lines;
};

TEST_F(MeshPlanCommand, PrintsOneHostsPlanAsJsonLines) {
  ASSERT_EQ(run({"--mesh.plan", peers(), "--mesh.self=b1:9470", "--mesh.at=1700000000"}), 0)
      << err_.str();
  std::vector<std::string> same;
  int cross = 0;
  for (const auto& line : lines) {
    EXPECT_FALSE(line.contains("self"));
    EXPECT_EQ(line["rate"], 1.0);
    if (line["reason"] == "same_tor") same.push_back(line["peer"]);
    if (line["reason"] == "cross_tor") {
      ++cross;
      EXPECT_TRUE(line["peer"] == "a1:9470" || line["peer"] == "a2:9470") << line;
    }
  }
  EXPECT_EQ(same, (std::vector<std::string>{"b2:9470", "b3:9470", "b4:9470"}));
  EXPECT_LE(cross, 2);
}

TEST_F(MeshPlanCommand, StarPrintsEveryHostsPlanWithSelf) {
  ASSERT_EQ(run({"--mesh.plan", peers(), "--mesh.self=*", "--mesh.at=0"}), 0) << err_.str();
  std::set<std::string> selves;
  for (const auto& line : lines) {
    selves.insert(line["self"]);
    EXPECT_NE(line["self"], line["peer"]);
    EXPECT_EQ(line.begin().key(), "self");
  }
  EXPECT_EQ(selves.size(), 6u);
}

TEST_F(MeshPlanCommand, ThePolicyComesFromTheMeshSectionOfTheConfigFile) {
  const auto config = write("ibprobe.yml",
                            "modules:\n  lat:\n    kind: write_lat\n"
                            "mesh:\n  peer_rate: 3\n  host_budget: 4\n");
  ASSERT_EQ(run({"--mesh.plan", peers(), "--mesh.self=b1:9470", "--config.file=" + config}), 0)
      << err_.str();
  double total = 0;
  for (const auto& line : lines) {
    total += line["rate"].get<double>();
    // Three same-ToR peers may take 80% of 4 pings/s: 3.2 / 3 each, below the peer rate of 3.
    if (line["reason"] == "same_tor") {
      EXPECT_DOUBLE_EQ(line["rate"].get<double>(), 3.2 / 3);
    }
  }
  EXPECT_LE(total, 4.0 + 1e-9);
}

TEST_F(MeshPlanCommand, PeersAndSelfComeFromTheConfigFileUnlessFlagsSayOtherwise) {
  const auto config = write("ibprobe.yml",
                            "modules:\n  lat:\n    kind: write_lat\n"
                            "mesh:\n  peers_file: " +
                                (dir_ / "peers.json").string() + "\n  self: a1:9470\n");
  ASSERT_EQ(run({"--mesh.plan", "--config.file=" + config, "--mesh.at=0"}), 0) << err_.str();
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.front()["peer"], "a2:9470");  // a1's one same-ToR peer comes first
  ASSERT_EQ(run({"--mesh.plan", "--config.file=" + config, "--mesh.self=b1:9470"}), 0);
  EXPECT_EQ(lines.front()["peer"], "b2:9470");
}

TEST_F(MeshPlanCommand, RefusesMissingOrUnknownSelfAndMissingPeers) {
  EXPECT_EQ(run({"--mesh.plan", peers()}), 2);
  EXPECT_NE(err_.str().find("--mesh.self"), std::string::npos);
  EXPECT_EQ(run({"--mesh.plan", "--mesh.self=a1:9470"}), 2);
  EXPECT_NE(err_.str().find("--mesh.peers-file"), std::string::npos);
  EXPECT_EQ(run({"--mesh.plan", peers(), "--mesh.self=zz:1"}), 2);
  EXPECT_NE(err_.str().find("zz:1 is not in the peer list"), std::string::npos);
  EXPECT_EQ(run({"--mesh.plan", "--mesh.peers-file=/nonexistent.json", "--mesh.self=a1:9470"}), 2);
  EXPECT_NE(err_.str().find("/nonexistent.json"), std::string::npos);
  EXPECT_NE(run({"--mesh.plan", peers(), "--mesh.self=a1:9470", "--mesh.at=soon"}), 0);
}

}  // namespace
}  // namespace ibprobe::testing
