// The GID table collector: one series per populated entry.
#pragma once

#include <chrono>
#include <memory>
#include <string_view>

#include "ibprobe/collectors.h"

namespace ibprobe::collectors {

inline constexpr std::string_view kGidsCollector = "gids";

// A port's GID table has gid_tbl_len entries (rxe 1024, mlx5 RoCE 256) of which a handful are
// populated, and every entry is a file. The whole table is read on the first scrape and again
// once `rescan_interval` has passed; the scrapes between re-read only the entries found
// populated, so an entry that is removed or changed shows at once and a new one within the
// interval. An entry's type and netdev are read again when its GID changes and on each rescan.
// Zero reads the whole table on every scrape.
inline constexpr std::chrono::seconds kDefaultGidRescanInterval{300};
std::unique_ptr<Collector> make_gids_collector(
    std::chrono::steady_clock::duration rescan_interval = kDefaultGidRescanInterval);

}  // namespace ibprobe::collectors
