// Discovery in a child process, its failures included: real child processes (the shell) that
// are killed, overrun the deadline, write garbage or fail, and one that answers. The exporter's
// own discovery child runs against a simulated fabric (tests/fabric).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ibprobe/fabric_discovery.h"

namespace ibprobe::fabric {
namespace {

using std::chrono::milliseconds;

std::vector<std::string> shell(const std::string& script) {
  return {"/bin/sh", "-c", script};
}

// The error discover_in_child gives, or "" when it returned a result.
std::string failure_of(const std::vector<std::string>& command, milliseconds deadline) {
  const auto result = discover_in_child(command, deadline);
  return result ? "" : result.error().message;
}

ErrorKind kind_of_failure(const std::vector<std::string>& command, milliseconds deadline) {
  const auto result = discover_in_child(command, deadline);
  EXPECT_FALSE(result) << "a failing discovery returned";
  return result ? ErrorKind{} : result.error().kind;
}

FabricModel two_node_model() {
  FabricModel model;
  FabricNode sw{0x200001, FabricNodeType::kSwitch, "leaf-01", 7, 2, {}};
  FabricPort cabled;
  cabled.number = 1;
  cabled.state = 4;
  cabled.physical_state = 5;
  cabled.width_lanes = 4;
  cabled.lane_gigabits = 25.78125;
  cabled.supported_width_lanes = 4;
  cabled.supported_lane_gigabits = 53.125;
  cabled.operational_vls = 8;
  cabled.remote = FabricRemote{0x300001, "node-0001 mlx5_0", 1};
  FabricPort down;
  down.number = 2;
  down.state = 1;
  down.physical_state = 2;
  sw.ports = {cabled, down};
  FabricNode ca{0x300001, FabricNodeType::kCa, "node-0001 mlx5_0", 12, 1, {}};
  FabricPort ca_port = cabled;
  ca_port.remote = FabricRemote{0x200001, "leaf-01", 1};
  ca.ports = {ca_port};
  model.nodes = {sw, ca};
  return model;
}

// Single quotes around a JSON text for the shell (the texts here have none inside).
std::string quoted(const std::string& text) {
  return "'" + text + "'";
}

TEST(DiscoveryJson, RoundTripsEveryField) {
  DiscoveryResult result{two_node_model(), 42};
  const auto parsed = discovery_from_json(discovery_to_json(result));
  ASSERT_TRUE(parsed) << parsed.error().message;
  const auto& back = *parsed;
  EXPECT_EQ(back.mads, 42u);
  ASSERT_EQ(back.model.nodes.size(), 2u);
  const auto& sw = back.model.nodes[0];
  EXPECT_EQ(sw.guid, 0x200001u);
  EXPECT_EQ(sw.type, FabricNodeType::kSwitch);
  EXPECT_EQ(sw.description, "leaf-01");
  EXPECT_EQ(sw.lid, 7);
  EXPECT_EQ(sw.port_count, 2);
  ASSERT_EQ(sw.ports.size(), 2u);
  EXPECT_EQ(sw.ports[0].number, 1);
  EXPECT_EQ(sw.ports[0].state, 4);
  EXPECT_EQ(sw.ports[0].physical_state, 5);
  EXPECT_EQ(sw.ports[0].width_lanes, 4);
  EXPECT_EQ(sw.ports[0].lane_gigabits, 25.78125);
  EXPECT_EQ(sw.ports[0].supported_width_lanes, 4);
  EXPECT_EQ(sw.ports[0].supported_lane_gigabits, 53.125);
  EXPECT_EQ(sw.ports[0].operational_vls, 8);
  ASSERT_TRUE(sw.ports[0].remote);
  EXPECT_EQ(sw.ports[0].remote->guid, 0x300001u);
  EXPECT_EQ(sw.ports[0].remote->description, "node-0001 mlx5_0");
  EXPECT_EQ(sw.ports[0].remote->port, 1);
  EXPECT_FALSE(sw.ports[1].remote);
  EXPECT_EQ(back.model.nodes[1].type, FabricNodeType::kCa);
  EXPECT_EQ(back.model.nodes[1].ports[0].remote->description, "leaf-01");
}

TEST(DiscoveryJson, RoundTripsSubnetManagers) {
  DiscoveryResult result{two_node_model(), 1};
  result.model.sm_lid = 1;
  result.model.subnet_managers = {{1, 0x100001, 7, SmState::kMaster, 4294967295u},
                                  {7, 0x100003, 3, SmState::kStandby, 12}};
  const auto parsed = discovery_from_json(discovery_to_json(result));
  ASSERT_TRUE(parsed) << parsed.error().message;
  const auto& model = parsed->model;
  EXPECT_EQ(model.sm_lid, 1);
  ASSERT_EQ(model.subnet_managers.size(), 2u);
  const auto& master = model.subnet_managers[0];
  EXPECT_EQ(master.lid, 1);
  EXPECT_EQ(master.guid, 0x100001u);
  EXPECT_EQ(master.priority, 7);
  EXPECT_EQ(master.state, SmState::kMaster);
  EXPECT_EQ(master.activity_count, 4294967295u);
  EXPECT_EQ(model.subnet_managers[1].state, SmState::kStandby);
  EXPECT_EQ(model.master(), &model.subnet_managers[0]);
}

TEST(SubnetManagers, MasterOnlyAtTheLocalPortsSmLid) {
  FabricModel model;
  EXPECT_EQ(model.master(), nullptr);  // no SM LID, no SM
  model.subnet_managers = {{7, 0x100003, 3, SmState::kMaster, 1}};
  EXPECT_EQ(model.master(), nullptr);  // a master elsewhere than where the port's SM LID points
  model.sm_lid = 7;
  EXPECT_NE(model.master(), nullptr);
  model.subnet_managers[0].state = SmState::kStandby;  // the SM LID answers, but not as master
  EXPECT_EQ(model.master(), nullptr);
  EXPECT_EQ(to_string(SmState::kNotActive), "not_active");
  EXPECT_EQ(to_string(SmState::kDiscovering), "discovering");
  EXPECT_EQ(to_string(SmState::kStandby), "standby");
  EXPECT_EQ(to_string(SmState::kMaster), "master");
}

TEST(SubnetManagers, NothingToAskAsksNothing) {
  DiscoveryOptions options;
  options.ca = "ibprobe_no_such_ca";
  const auto none = query_subnet_managers(options, 0, {});
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_TRUE(none->empty());
}

TEST(SubnetManagers, PortThatCannotAskIsAnError) {
  DiscoveryOptions options;
  options.ca = "ibprobe_no_such_ca";
  options.ca_port = 1;
  const auto result = query_subnet_managers(options, 1, {7});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().kind, ErrorKind::kLocalPort);
  EXPECT_EQ(result.error().message, "cannot open ibprobe_no_such_ca port 1 for SMInfo");
}

TEST(DiscoveryJson, RefusesWhatIsNotAResult) {
  for (const char* text : {"", "garbage", "{}", "[]", R"({"mads":1})", R"({"mads":-1,"nodes":[]})",
                           R"({"mads":1.5,"nodes":[]})", R"({"mads":1,"nodes":[{"guid":1}]})",
                           R"({"mads":1,"nodes":[{"guid":1,"type":"hub","description":"",)"
                           R"("lid":0,"port_count":0,"ports":[]}]})",
                           R"({"mads":1,"nodes":[{"guid":1,"type":"ca","description":"",)"
                           R"("lid":70000,"port_count":0,"ports":[]}]})",
                           R"({"mads":1,"nodes":[],"sm_lid":70000})",
                           R"({"mads":1,"nodes":[],"subnet_managers":[{"lid":1}]})",
                           R"({"mads":1,"nodes":[],"subnet_managers":[{"lid":1,"guid":1,)"
                           R"("priority":1,"state":4,"activity_count":1}]})"}) {
    const auto result = discovery_from_json(text);
    ASSERT_FALSE(result) << text;
    EXPECT_EQ(result.error().kind, ErrorKind::kMalformedResult) << text;
  }
}

TEST(DiscoveryNames, ReplaceNodesAndFarEnds) {
  auto model = two_node_model();
  apply_node_names(model, {{0x300001, "gpu-17"}});
  EXPECT_EQ(model.nodes[0].description, "leaf-01");
  EXPECT_EQ(model.nodes[0].ports[0].remote->description, "gpu-17");
  EXPECT_EQ(model.nodes[1].description, "gpu-17");
}

TEST(DiscoveryChild, AnswerIsTheModel) {
  const auto text = discovery_to_json(DiscoveryResult{two_node_model(), 9});
  const auto result = discover_in_child(shell("printf %s " + quoted(text)), milliseconds(5000));
  ASSERT_TRUE(result) << result.error().message;
  EXPECT_EQ(result->mads, 9u);
  ASSERT_EQ(result->model.nodes.size(), 2u);
  EXPECT_EQ(result->model.nodes[0].ports[0].remote->description, "node-0001 mlx5_0");
}

TEST(DiscoveryChild, InheritsTheEnvironment) {
  // ibsim's preload reaches the child this way.
  ASSERT_EQ(setenv("IBPROBE_TEST_DISCOVERY_MADS", "77", 1), 0);
  const auto result =
      discover_in_child(shell(R"(printf '{"mads":%s,"nodes":[]}' "$IBPROBE_TEST_DISCOVERY_MADS")"),
                        milliseconds(5000));
  unsetenv("IBPROBE_TEST_DISCOVERY_MADS");
  ASSERT_TRUE(result) << result.error().message;
  EXPECT_EQ(result->mads, 77u);
}

TEST(DiscoveryChild, KilledChildFails) {
  EXPECT_EQ(failure_of(shell("kill -9 $$"), milliseconds(5000)),
            "discovery child was killed by signal 9 (Killed)");
  // Killed after writing a whole result: still not one.
  const auto text = discovery_to_json(DiscoveryResult{two_node_model(), 9});
  EXPECT_EQ(failure_of(shell("printf %s " + quoted(text) + "; kill -SEGV $$"), milliseconds(5000)),
            "discovery child was killed by signal 11 (Segmentation fault)");
}

TEST(DiscoveryChild, GarbageFails) {
  EXPECT_EQ(failure_of(shell("echo not a model"), milliseconds(5000))
                .rfind("malformed discovery output: ", 0),
            0u);
  EXPECT_EQ(failure_of(shell("true"), milliseconds(5000)).rfind("malformed discovery output: ", 0),
            0u);
  const auto text = discovery_to_json(DiscoveryResult{two_node_model(), 9});
  EXPECT_EQ(
      failure_of(shell("printf %s " + quoted(text.substr(0, text.size() / 2))), milliseconds(5000))
          .rfind("malformed discovery output: ", 0),
      0u);
}

TEST(DiscoveryChild, NonZeroExitFailsWithTheChildsReason) {
  EXPECT_EQ(
      failure_of(shell(R"(echo '{"error":"no InfiniBand port"}'; exit 1)"), milliseconds(5000)),
      "discovery child exited with status 1: no InfiniBand port");
  EXPECT_EQ(failure_of(shell("exit 3"), milliseconds(5000)),
            "discovery child exited with status 3");
}

TEST(DiscoveryChild, OverrunIsKilledAtTheDeadline) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(failure_of(shell("sleep 30"), milliseconds(300)),
            "discovery child did not finish within 300 ms and was killed");
  // Closes its stdout early, then hangs: the wait for its exit keeps the deadline too.
  EXPECT_EQ(failure_of(shell("exec >&-; sleep 30"), milliseconds(300)),
            "discovery child did not finish within 300 ms and was killed");
  // Writes a little and hangs with stdout open.
  EXPECT_EQ(failure_of(shell("printf '{'; sleep 30"), milliseconds(300)),
            "discovery child did not finish within 300 ms and was killed");
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, std::chrono::seconds(10));  // three deadlines, not three sleeps of 30 s
}

TEST(DiscoveryChild, StopKillsTheChildAtOnce) {
  std::stop_source stop;
  std::jthread stopper([&] {
    std::this_thread::sleep_for(milliseconds(200));
    stop.request_stop();
  });
  const auto start = std::chrono::steady_clock::now();
  const auto result = discover_in_child(shell("sleep 30"), milliseconds(30000), stop.get_token());
  ASSERT_FALSE(result) << "a stopped discovery returned";
  EXPECT_EQ(result.error().kind, ErrorKind::kStopped);
  EXPECT_EQ(result.error().message, "discovery child stopped and killed");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(DiscoveryChild, MissingExecutableFails) {
  EXPECT_EQ(
      failure_of({"/nonexistent/ibprobe_exporter", "--fabric.discover-once"}, milliseconds(5000)),
      "discovery child /nonexistent/ibprobe_exporter could not start: No such file or "
      "directory");
}

TEST(DiscoveryChild, EachFailureSaysItsKind) {
  EXPECT_EQ(kind_of_failure(shell("sleep 30"), milliseconds(300)), ErrorKind::kDeadline);
  EXPECT_EQ(kind_of_failure(shell("kill -9 $$"), milliseconds(5000)), ErrorKind::kChild);
  EXPECT_EQ(kind_of_failure(shell("exit 3"), milliseconds(5000)), ErrorKind::kChild);
  EXPECT_EQ(kind_of_failure({"/nonexistent/ibprobe_exporter"}, milliseconds(5000)),
            ErrorKind::kChild);
  EXPECT_EQ(kind_of_failure(shell("echo not a model"), milliseconds(5000)),
            ErrorKind::kMalformedResult);
}

TEST(DiscoveryChild, CommandCarriesThePortAndMadOptions) {
  DiscoveryOptions options{"mlx5_1", 2, milliseconds(50), 1, {{1, "name"}}};
  EXPECT_EQ(discovery_child_command("/usr/bin/ibprobe_exporter", options),
            (std::vector<std::string>{"/usr/bin/ibprobe_exporter", "--fabric.discover-once",
                                      "--fabric.ca=mlx5_1", "--fabric.ca-port=2",
                                      "--fabric.timeout-ms=50", "--fabric.retries=1"}));
}

}  // namespace
}  // namespace ibprobe::fabric
