#include "fabric_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <utility>

#include "ibprobe/fabric_discovery.h"
#include "ibprobe/unique_fd.h"
#include "json_integer.h"

namespace ibprobe::fabric {
namespace {

using json = nlohmann::json;

// Changed whenever the layout changes: an exporter never reads another layout as its own.
constexpr std::string_view kStateFormat = "ibprobe-fabric-state-1";

Error state_error(const std::string& why) {
  return Error{ErrorKind::kStateFile, why};
}

std::string system_error(const std::string& what, const std::filesystem::path& path) {
  return what + " " + path.string() + ": " + std::strerror(errno);
}

std::expected<void, Error> write_all(int fd, std::string_view text,
                                     const std::filesystem::path& path) {
  while (!text.empty()) {
    const auto written = ::write(fd, text.data(), text.size());
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return std::unexpected(state_error(system_error("cannot write", path)));
    text.remove_prefix(static_cast<std::size_t>(written));
  }
  return {};
}

}  // namespace

std::string fabric_state_to_json(const FabricModel& model, const LinkHistory& history) {
  json links = json::array();
  for (const auto& [key, link] : history.links()) {
    links.push_back({{"guid", key.first},
                     {"port", key.second},
                     {"remote_guid", link.remote.guid},
                     {"remote_description", link.remote.description},
                     {"remote_port", link.remote.port},
                     {"best_width_lanes", link.best_width_lanes},
                     {"best_lane_gigabits", link.best_lane_gigabits},
                     {"present", link.present},
                     {"width_lanes", link.width_lanes},
                     {"lane_gigabits", link.lane_gigabits}});
  }
  return json{{"format", kStateFormat},
              {"discovered_at_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                                       model.discovered_at.time_since_epoch())
                                       .count()},
              {"model", json::parse(discovery_to_json(DiscoveryResult{model, 0}))},
              {"links", std::move(links)}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

std::expected<FabricState, Error> fabric_state_from_json(std::string_view text) {
  try {
    const json in = json::parse(text);
    if (!in.is_object() || in.value("format", "") != kStateFormat) {
      return std::unexpected(state_error("not a saved fabric state (want \"format\": \"" +
                                         std::string(kStateFormat) + "\")"));
    }
    auto discovered = discovery_from_json(in.at("model").dump());
    if (!discovered) return std::unexpected(state_error(discovered.error().message));
    FabricState state;
    state.model = std::move(discovered->model);
    // system_clock counts nanoseconds in 64 bits: up to the year 2262, 9.2e12 ms.
    const auto discovered_ms = json_integer<std::int64_t>(in, "discovered_at_ms");
    if (discovered_ms < 0 || discovered_ms > 9'000'000'000'000) {
      throw std::runtime_error("\"discovered_at_ms\" is not a time between 1970 and 2255");
    }
    state.model.discovered_at =
        std::chrono::system_clock::time_point(std::chrono::milliseconds(discovered_ms));
    LinkHistory::Links links;
    for (const auto& link_in : in.at("links")) {
      LinkHistory::Link link;
      link.remote = FabricRemote{json_integer<std::uint64_t>(link_in, "remote_guid"),
                                 link_in.at("remote_description").get<std::string>(),
                                 json_integer<int>(link_in, "remote_port")};
      link.best_width_lanes = json_integer<int>(link_in, "best_width_lanes");
      link.best_lane_gigabits = link_in.at("best_lane_gigabits").get<double>();
      link.present = link_in.at("present").get<bool>();
      link.width_lanes = json_integer<int>(link_in, "width_lanes");
      link.lane_gigabits = link_in.at("lane_gigabits").get<double>();
      links[{json_integer<std::uint64_t>(link_in, "guid"), json_integer<int>(link_in, "port")}] =
          link;
    }
    state.history = LinkHistory(std::move(links));
    return state;
  } catch (const std::exception& e) {
    return std::unexpected(state_error(std::string("not a saved fabric state: ") + e.what()));
  }
}

std::expected<void, Error> save_fabric_state(const std::filesystem::path& path,
                                             std::string_view text) {
  const auto temporary = std::filesystem::path(path).concat(".tmp");
  {
    UniqueFd file(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!file) return std::unexpected(state_error(system_error("cannot create", temporary)));
    if (auto written = write_all(file.get(), text, temporary); !written) return written;
    if (::fsync(file.get()) != 0) {
      return std::unexpected(state_error(system_error("cannot sync", temporary)));
    }
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const auto why = state_error(system_error("cannot rename " + temporary.string() + " to", path));
    ::unlink(temporary.c_str());
    return std::unexpected(why);
  }
  // The rename itself is durable once the directory is synced.
  const auto directory = path.has_parent_path() ? path.parent_path() : ".";
  UniqueFd parent(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent || ::fsync(parent.get()) != 0) {
    return std::unexpected(state_error(system_error("cannot sync directory", directory)));
  }
  return {};
}

std::expected<FabricState, Error> load_fabric_state(const std::filesystem::path& path) {
  UniqueFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!file) return std::unexpected(state_error(system_error("cannot read state file", path)));
  std::string text;
  char buffer[65536];
  while (true) {
    const auto got = ::read(file.get(), buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return std::unexpected(state_error(system_error("cannot read state file", path)));
    if (got == 0) break;
    text.append(buffer, static_cast<std::size_t>(got));
  }
  auto state = fabric_state_from_json(text);
  if (!state) {
    return std::unexpected(
        state_error("state file " + path.string() + ": " + state.error().message));
  }
  return state;
}

}  // namespace ibprobe::fabric
