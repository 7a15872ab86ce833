// Discovery in a short-lived child process: rdma-core 44's libibnetdisc leaks a LID-map entry per
// switch port per discovery, which would grow a long-running exporter without bound. The child
// is the exporter's own executable in a hidden mode, spawned (posix_spawn: the exporter has
// threads) with this process's environment, so a preload such as ibsim's reaches it too.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <stop_token>
#include <thread>
#include <utility>

#include "ibprobe/fabric_discovery.h"
#include "ibprobe/unique_fd.h"
#include "json_integer.h"

extern char** environ;

namespace ibprobe::fabric {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// A fabric of 100,000 ports writes a few tens of MB; anything far beyond is not a result.
constexpr std::size_t kMaxOutputBytes = 512u << 20;

class SpawnFileActions {
 public:
  SpawnFileActions() { posix_spawn_file_actions_init(&actions_); }
  ~SpawnFileActions() { posix_spawn_file_actions_destroy(&actions_); }
  SpawnFileActions(const SpawnFileActions&) = delete;
  SpawnFileActions& operator=(const SpawnFileActions&) = delete;
  posix_spawn_file_actions_t* get() { return &actions_; }

 private:
  posix_spawn_file_actions_t actions_;
};

class SpawnAttributes {
 public:
  SpawnAttributes() { posix_spawnattr_init(&attributes_); }
  ~SpawnAttributes() { posix_spawnattr_destroy(&attributes_); }
  SpawnAttributes(const SpawnAttributes&) = delete;
  SpawnAttributes& operator=(const SpawnAttributes&) = delete;
  posix_spawnattr_t* get() { return &attributes_; }

 private:
  posix_spawnattr_t attributes_;
};

// When the child must have answered, and what stops waiting for it earlier.
struct Limits {
  std::chrono::milliseconds deadline;
  Clock::time_point until;
  std::stop_token stop;

  bool over() const { return Clock::now() >= until || stop.stop_requested(); }
  Error overran() const {
    if (stop.stop_requested()) return {ErrorKind::kStopped, "discovery child stopped and killed"};
    return {ErrorKind::kDeadline, "discovery child did not finish within " +
                                      std::to_string(deadline.count()) + " ms and was killed"};
  }
};

// The child until it is reaped: killed and reaped on every way out, so none is left behind.
class Child {
 public:
  explicit Child(pid_t pid) : pid_(pid) {}
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // The exit status once the child ended before `limits.until`; the error when it still runs
  // then, a stop was requested or waitpid fails.
  std::expected<int, Error> wait_until(const Limits& limits) {
    for (;;) {
      int status = 0;
      const pid_t done = ::waitpid(pid_, &status, WNOHANG);
      if (done == pid_) {
        pid_ = -1;
        return status;
      }
      if (done < 0 && errno != EINTR) {
        pid_ = -1;
        return std::unexpected(Error{
            ErrorKind::kChild, std::string("discovery child: waitpid: ") + std::strerror(errno)});
      }
      if (limits.over()) return std::unexpected(limits.overran());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

 private:
  pid_t pid_;
};

Error call_failed(std::string_view call) {
  return {ErrorKind::kChild, "discovery child: " + std::string(call) + ": " + std::strerror(errno)};
}

std::string error_in(std::string_view output) {
  const json parsed = json::parse(output, nullptr, false);
  if (parsed.is_object() && parsed.contains("error") && parsed["error"].is_string()) {
    return ": " + parsed["error"].get<std::string>();
  }
  return "";
}

std::string describe_status(int status, std::string_view output) {
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    return "was killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  }
  return "exited with status " + std::to_string(WEXITSTATUS(status)) + error_in(output);
}

template <typename Number>
bool parse_number(std::string_view text, Number& out) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), out);
  return error == std::errc() && end == text.data() + text.size();
}

json port_to_json(const FabricPort& port) {
  json out{{"number", port.number},
           {"state", port.state},
           {"physical_state", port.physical_state},
           {"width_lanes", port.width_lanes},
           {"lane_gigabits", port.lane_gigabits},
           {"supported_width_lanes", port.supported_width_lanes},
           {"supported_lane_gigabits", port.supported_lane_gigabits},
           {"operational_vls", port.operational_vls}};
  if (port.remote) {
    out["remote"] = {{"guid", port.remote->guid},
                     {"description", port.remote->description},
                     {"port", port.remote->port}};
  }
  return out;
}

FabricPort port_from_json(const json& in) {
  FabricPort port;
  port.number = json_integer<int>(in, "number");
  port.state = json_integer<int>(in, "state");
  port.physical_state = json_integer<int>(in, "physical_state");
  port.width_lanes = json_integer<int>(in, "width_lanes");
  port.lane_gigabits = in.at("lane_gigabits").get<double>();
  port.supported_width_lanes = json_integer<int>(in, "supported_width_lanes");
  port.supported_lane_gigabits = in.at("supported_lane_gigabits").get<double>();
  port.operational_vls = json_integer<int>(in, "operational_vls");
  if (const auto remote = in.find("remote"); remote != in.end()) {
    port.remote = FabricRemote{json_integer<std::uint64_t>(*remote, "guid"),
                               remote->at("description").get<std::string>(),
                               json_integer<int>(*remote, "port")};
  }
  return port;
}

FabricNodeType type_from_json(const std::string& type) {
  if (type == "switch") return FabricNodeType::kSwitch;
  if (type == "router") return FabricNodeType::kRouter;
  if (type == "ca") return FabricNodeType::kCa;
  throw std::runtime_error("unknown node type \"" + type + "\"");
}

}  // namespace

std::string discovery_to_json(const DiscoveryResult& result) {
  json nodes = json::array();
  for (const auto& node : result.model.nodes) {
    json ports = json::array();
    for (const auto& port : node.ports) ports.push_back(port_to_json(port));
    nodes.push_back({{"guid", node.guid},
                     {"type", to_string(node.type)},
                     {"description", node.description},
                     {"lid", node.lid},
                     {"port_count", node.port_count},
                     {"ports", std::move(ports)}});
  }
  json managers = json::array();
  for (const auto& sm : result.model.subnet_managers) {
    managers.push_back({{"lid", sm.lid},
                        {"guid", sm.guid},
                        {"priority", sm.priority},
                        {"state", static_cast<int>(sm.state)},
                        {"activity_count", sm.activity_count}});
  }
  // Descriptions are the nodes' own bytes: replace what is not UTF-8 rather than fail.
  return json{{"mads", result.mads},
              {"nodes", std::move(nodes)},
              {"sm_lid", result.model.sm_lid},
              {"subnet_managers", std::move(managers)}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

std::expected<DiscoveryResult, Error> discovery_from_json(std::string_view text) {
  try {
    const json in = json::parse(text);
    DiscoveryResult result;
    result.mads = json_integer<unsigned>(in, "mads");
    for (const auto& node_in : in.at("nodes")) {
      FabricNode node;
      node.guid = json_integer<std::uint64_t>(node_in, "guid");
      node.type = type_from_json(node_in.at("type").get<std::string>());
      node.description = node_in.at("description").get<std::string>();
      node.lid = json_integer<std::uint16_t>(node_in, "lid");
      node.port_count = json_integer<int>(node_in, "port_count");
      for (const auto& port : node_in.at("ports")) node.ports.push_back(port_from_json(port));
      result.model.nodes.push_back(std::move(node));
    }
    // Optional: a result without them has no SM LID and no SM.
    if (in.contains("sm_lid")) result.model.sm_lid = json_integer<std::uint16_t>(in, "sm_lid");
    if (const auto managers = in.find("subnet_managers"); managers != in.end()) {
      for (const auto& sm_in : *managers) {
        SubnetManager sm;
        sm.lid = json_integer<std::uint16_t>(sm_in, "lid");
        sm.guid = json_integer<std::uint64_t>(sm_in, "guid");
        sm.priority = json_integer<int>(sm_in, "priority");
        const int state = json_integer<int>(sm_in, "state");
        if (state < 0 || state > static_cast<int>(SmState::kMaster)) {
          throw std::runtime_error("unknown SM state " + std::to_string(state));
        }
        sm.state = static_cast<SmState>(state);
        sm.activity_count = json_integer<std::uint32_t>(sm_in, "activity_count");
        result.model.subnet_managers.push_back(sm);
      }
    }
    return result;
  } catch (const std::exception& e) {  // nlohmann's, and integer_at's and type_from_json's
    return std::unexpected(
        Error{ErrorKind::kMalformedResult, std::string("malformed discovery output: ") + e.what()});
  }
}

std::vector<std::string> discovery_child_command(const std::filesystem::path& executable,
                                                 const DiscoveryOptions& options) {
  return {executable.string(),
          std::string(kDiscoverOnceFlag),
          "--fabric.ca=" + options.ca,
          "--fabric.ca-port=" + std::to_string(options.ca_port),
          "--fabric.timeout-ms=" + std::to_string(options.timeout.count()),
          "--fabric.retries=" + std::to_string(options.retries)};
}

[[noreturn]] void run_discovery_child(const std::vector<std::string_view>& args) {
  DiscoveryOptions options;
  std::string error;
  for (const auto arg : args) {
    const auto equals = arg.find('=');
    const auto name = arg.substr(0, equals);
    const auto value = equals == std::string_view::npos ? "" : arg.substr(equals + 1);
    long long timeout_ms = 0;
    bool understood = true;
    if (name == "--fabric.ca") {
      options.ca = value;
    } else if (name == "--fabric.ca-port") {
      understood = parse_number(value, options.ca_port);
    } else if (name == "--fabric.retries") {
      understood = parse_number(value, options.retries);
    } else if (name == "--fabric.timeout-ms") {
      understood = parse_number(value, timeout_ms);
      options.timeout = std::chrono::milliseconds(timeout_ms);
    } else {
      understood = false;
    }
    if (!understood) {
      error = "bad argument of " + std::string(kDiscoverOnceFlag) + ": " + std::string(arg);
      break;
    }
  }
  std::expected<DiscoveryResult, Error> result;
  if (error.empty()) {
    result = discover_fabric(options);
    if (result) {
      // Within the same deadline: the parent kills this process at it. A port that cannot ask
      // fails the discovery (the last good model stays) rather than report "no master".
      auto managers = query_subnet_managers(options, result->model.sm_lid, result->model.sm_ports);
      if (managers) {
        result->model.subnet_managers = std::move(*managers);
      } else {
        error = managers.error().message;
      }
    } else {
      error = result.error().message;
    }
  }
  std::string output =
      error.empty() ? discovery_to_json(*result)
                    : json{{"error", error}}.dump(-1, ' ', false, json::error_handler_t::replace);
  const int status = error.empty() ? 0 : 1;
  output += '\n';
  const bool written = std::fwrite(output.data(), 1, output.size(), stdout) == output.size() &&
                       std::fflush(stdout) == 0;
  // exit, not _exit: the exit handlers include ibsim's preload detaching from the simulator.
  std::exit(written ? status : 1);
}

std::expected<DiscoveryResult, Error> discover_in_child(const std::vector<std::string>& command,
                                                        std::chrono::milliseconds deadline,
                                                        std::stop_token stop) {
  const Limits limits{deadline, Clock::now() + deadline, std::move(stop)};
  int pipe_ends[2];
  if (::pipe2(pipe_ends, O_CLOEXEC) != 0) return std::unexpected(call_failed("pipe"));
  UniqueFd read_end(pipe_ends[0]);
  UniqueFd write_end(pipe_ends[1]);

  SpawnFileActions actions;
  posix_spawn_file_actions_adddup2(actions.get(), write_end.get(), STDOUT_FILENO);
  // Only stdin, stdout and stderr: not the exporter's listening socket or umad device.
  posix_spawn_file_actions_addclosefrom_np(actions.get(), STDERR_FILENO + 1);
  SpawnAttributes attributes;
  // The exporter blocks its stop signals for sigwait and ignores SIGPIPE; the child starts clean.
  sigset_t none;
  sigemptyset(&none);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigmask(attributes.get(), &none);
  posix_spawnattr_setsigdefault(attributes.get(), &defaults);
  posix_spawnattr_setflags(attributes.get(), POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<char*> argv;
  for (const auto& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (const int error =
          posix_spawn(&pid, argv[0], actions.get(), attributes.get(), argv.data(), environ)) {
    return std::unexpected(
        Error{ErrorKind::kChild,
              "discovery child " + command[0] + " could not start: " + std::strerror(error)});
  }
  Child child(pid);
  write_end.reset();

  std::string output;
  char buffer[65536];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(limits.until - Clock::now()).count();
    if (left <= 0 || limits.stop.stop_requested()) return std::unexpected(limits.overran());
    pollfd readable{read_end.get(), POLLIN, 0};
    // In slices, so a stop (the exporter shutting down) does not wait for the deadline.
    const int ready = ::poll(&readable, 1, static_cast<int>(std::min<long long>(left, 100)));
    if (ready < 0 && errno != EINTR) return std::unexpected(call_failed("poll"));
    if (ready <= 0) continue;
    const ssize_t got = ::read(read_end.get(), buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return std::unexpected(call_failed("read"));
    if (got == 0) break;
    output.append(buffer, static_cast<std::size_t>(got));
    if (output.size() > kMaxOutputBytes) {
      return std::unexpected(Error{ErrorKind::kChild, "discovery child wrote more than " +
                                                          std::to_string(kMaxOutputBytes >> 20) +
                                                          " MiB and was killed"});
    }
  }
  const auto status = child.wait_until(limits);
  if (!status) return std::unexpected(status.error());
  if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    return std::unexpected(
        Error{ErrorKind::kChild, "discovery child " + describe_status(*status, output)});
  }
  return discovery_from_json(output);
}

}  // namespace ibprobe::fabric
