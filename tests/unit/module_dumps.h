// The real module dumps of tests/fixtures/module_eeprom/ as the pages a reader gets, for the
// decoder's tests and the link_health collector's. A file that includes this header needs
// IBPROBE_SOURCE_DIR (tests/CMakeLists.txt gives it to the files that read the source tree).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "hex_dump.h"
#include "ibprobe/module_eeprom.h"

namespace ibprobe::testing {

using Bytes = std::vector<std::uint8_t>;

inline constexpr collectors::ModulePage kLower{};
inline constexpr collectors::ModulePage kA2{.i2c_address = 0x51};
inline constexpr collectors::ModulePage kPage00{.offset = 128};
inline constexpr collectors::ModulePage kPage03{.page = 0x03, .offset = 128};

// A fixture dump by its file name.
inline Bytes read_hex_dump(const std::string& name) {
  const auto path =
      std::filesystem::path(IBPROBE_SOURCE_DIR) / "tests/fixtures/module_eeprom" / name;
  EXPECT_TRUE(std::filesystem::exists(path)) << path;
  return read_hex_dump_file(path);
}

inline Bytes slice(const Bytes& bytes, std::size_t first) {
  return {bytes.begin() + static_cast<std::ptrdiff_t>(first),
          bytes.begin() + static_cast<std::ptrdiff_t>(first + 128)};
}

// What a module holds, page by page.
using ModuleMemory = std::map<collectors::ModulePage, Bytes>;

// ethtool's ioctl layout of an SFP: A0h bytes 0-255, then A2h bytes 0-255.
inline ModuleMemory sfp_memory(const Bytes& dump) {
  return {{kLower, slice(dump, 0)}, {kA2, slice(dump, 256)}};
}

// ethtool's ioctl layout of a QSFP: the lower page, then upper pages 00h to 03h.
inline ModuleMemory qsfp_memory(const Bytes& dump) {
  return {{kLower, slice(dump, 0)}, {kPage00, slice(dump, 128)}, {kPage03, slice(dump, 512)}};
}

// Reads `memory` as a reader would: whatever module_pages_to_read asks for, until it asks for
// nothing new; a page `memory` lacks is a failed read. `asked` receives every page asked for.
inline collectors::ModulePages read_module(const ModuleMemory& memory,
                                           std::set<collectors::ModulePage>* asked = nullptr) {
  collectors::ModulePages pages;
  std::set<collectors::ModulePage> tried;
  for (bool more = true; more;) {
    more = false;
    const auto wanted = collectors::module_pages_to_read(pages);
    if (!wanted) break;
    for (const auto& page : *wanted) {
      if (!tried.insert(page).second) continue;
      more = true;
      if (const auto it = memory.find(page); it != memory.end()) pages[page] = it->second;
    }
  }
  if (asked) *asked = tried;
  return pages;
}

}  // namespace ibprobe::testing
