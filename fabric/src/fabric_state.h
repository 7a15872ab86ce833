// What a restart must not forget (--fabric.state-file): the last good model, served until the
// first discovery, and the memory of every cable seen, so a cable missing or downgraded before
// the restart is still reported after it.
#pragma once

#include <expected>
#include <filesystem>
#include <string>
#include <string_view>

#include "ibprobe/fabric_error.h"
#include "ibprobe/fabric_model.h"

namespace ibprobe::fabric {

struct FabricState {
  FabricModel model;
  LinkHistory history;
};

std::string fabric_state_to_json(const FabricModel& model, const LinkHistory& history);
// kStateFile naming what is wrong for anything but what fabric_state_to_json writes.
std::expected<FabricState, Error> fabric_state_from_json(std::string_view text);

// Writes `text` to a temporary file beside `path`, syncs it and renames it over `path` (then
// syncs the directory): a crash leaves the old state or the new one, never half of one.
std::expected<void, Error> save_fabric_state(const std::filesystem::path& path,
                                             std::string_view text);
// The saved state; kStateFile with the path and why for one that cannot be read or is not a
// saved state. A file that does not exist is ErrorKind::kStateFile too: the caller tells it
// apart with std::filesystem::exists before.
std::expected<FabricState, Error> load_fabric_state(const std::filesystem::path& path);

}  // namespace ibprobe::fabric
