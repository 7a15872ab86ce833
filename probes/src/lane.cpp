#include <algorithm>
#include <fstream>
#include <string>
#include <utility>

#include "ibprobe/probes.h"

namespace ibprobe::probes {

std::string lane_pkey_problem(std::uint32_t pkey_index, int table_entries) {
  const std::string index = std::to_string(pkey_index);
  if (std::cmp_greater_equal(pkey_index, table_entries)) {
    return "pkey_index=" + index + ": the port's P_Key table has " + std::to_string(table_entries) +
           (table_entries == 1 ? " entry" : " entries") + ", no index " + index;
  }
  return "pkey_index=" + index + ": entry " + index +
         " of the port's P_Key table is empty (P_Key 0x0000 is invalid)";
}

std::expected<void, std::string> check_pkey_index(const std::filesystem::path& sysfs_root,
                                                  const std::string& device, std::uint8_t port,
                                                  std::uint32_t pkey_index) {
  if (pkey_index == 0) return {};
  const auto table =
      sysfs_root / "class" / "infiniband" / device / "ports" / std::to_string(port) / "pkeys";
  const std::string where = device + " port " + std::to_string(port) + ": ";
  std::error_code error;
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(table, error)) {
    (void)entry;
    ++entries;
  }
  std::ifstream file(table / std::to_string(pkey_index));
  std::string text;
  if (!file || !(file >> text)) {
    // Absent: a table this short, or no table at all (0 entries).
    return std::unexpected(where +
                           lane_pkey_problem(pkey_index, std::min<int>(entries, pkey_index)));
  }
  unsigned long value = 0;
  try {
    value = std::stoul(text, nullptr, 0);
  } catch (const std::exception&) {
    return std::unexpected(where + "pkey_index=" + std::to_string(pkey_index) + ": " +
                           (table / std::to_string(pkey_index)).string() + " holds '" + text +
                           "', not a P_Key");
  }
  // The top bit is the membership (full or limited); the key is the low 15 bits.
  if ((value & 0x7fff) == 0) {
    return std::unexpected(where +
                           lane_pkey_problem(pkey_index, std::max<int>(entries, pkey_index + 1)));
  }
  return {};
}

std::expected<void, std::string> check_dlid(const std::filesystem::path& sysfs_root,
                                            const std::string& device, std::uint8_t port,
                                            std::optional<std::uint32_t> dlid) {
  if (!dlid) return {};
  const auto file =
      sysfs_root / "class" / "infiniband" / device / "ports" / std::to_string(port) / "link_layer";
  std::ifstream in(file);
  std::string link_layer;
  std::getline(in, link_layer);
  const std::string where =
      device + " port " + std::to_string(port) + ": dlid=" + std::to_string(*dlid) + ": ";
  if (!in && link_layer.empty()) {
    return std::unexpected(where + "cannot read " + file.string() +
                           " to tell whether the port routes by LID");
  }
  if (link_layer != "InfiniBand") {
    return std::unexpected(where + "the port's link layer is " + link_layer +
                           " (RoCE): packets are routed by GID and a destination LID is never "
                           "used");
  }
  return {};
}

std::expected<void, std::string> check_lane_on_port(const std::filesystem::path& sysfs_root,
                                                    const std::string& device, std::uint8_t port,
                                                    const ProbeSpec& spec) {
  if (auto fits = check_pkey_index(sysfs_root, device, port, spec.pkey_index); !fits) return fits;
  return check_dlid(sysfs_root, device, port, spec.dlid);
}

}  // namespace ibprobe::probes
