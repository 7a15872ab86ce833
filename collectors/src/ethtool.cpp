#include "ibprobe/ethtool.h"

#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <set>

#include "collectors_internal.h"
#include "devices.h"
#include "ibprobe/unique_fd.h"
#include "sysfs.h"

namespace ibprobe::collectors {
namespace {

std::error_code system_error(int errno_value) {
  return {errno_value, std::system_category()};
}

// One SIOCETHTOOL request; no error or the errno.
std::error_code ethtool_ioctl(const UniqueFd& socket, const std::string& netdev, void* command) {
  ifreq request{};
  if (netdev.size() >= sizeof(request.ifr_name)) return system_error(ENODEV);
  std::memcpy(request.ifr_name, netdev.data(), netdev.size());
  request.ifr_data = static_cast<char*>(command);
  return ::ioctl(socket.get(), SIOCETHTOOL, &request) == 0 ? std::error_code()
                                                           : system_error(errno);
}

class IoctlEthtoolSource final : public EthtoolSource {
 public:
  EthtoolRead statistics(const std::string& netdev) const override {
    const UniqueFd socket(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!socket) return std::unexpected(system_error(errno));
    // ethtool_sset_info ends in a flexible array: one u32 follows for the one set asked.
    alignas(ethtool_sset_info)
        std::array<std::uint8_t, sizeof(ethtool_sset_info) + sizeof(std::uint32_t)>
            set_buffer{};
    auto* set_info = reinterpret_cast<ethtool_sset_info*>(set_buffer.data());
    set_info->cmd = ETHTOOL_GSSET_INFO;
    set_info->sset_mask = std::uint64_t{1} << ETH_SS_STATS;
    if (const auto error = ethtool_ioctl(socket, netdev, set_info)) return std::unexpected(error);
    const std::uint32_t count = set_info->sset_mask ? set_info->data[0] : 0;
    if (count == 0) return EthtoolStatistics{};

    std::vector<std::uint8_t> strings(sizeof(ethtool_gstrings) + count * ETH_GSTRING_LEN);
    auto* gstrings = reinterpret_cast<ethtool_gstrings*>(strings.data());
    gstrings->cmd = ETHTOOL_GSTRINGS;
    gstrings->string_set = ETH_SS_STATS;
    gstrings->len = count;
    if (const auto error = ethtool_ioctl(socket, netdev, gstrings)) return std::unexpected(error);

    std::vector<std::uint8_t> values(sizeof(ethtool_stats) + count * sizeof(std::uint64_t));
    auto* stats = reinterpret_cast<ethtool_stats*>(values.data());
    stats->cmd = ETHTOOL_GSTATS;
    stats->n_stats = count;
    if (const auto error = ethtool_ioctl(socket, netdev, stats)) return std::unexpected(error);
    // The driver may have changed its set between the calls (a queue added): take what both
    // answers cover.
    const std::uint32_t n = std::min({count, gstrings->len, stats->n_stats});
    EthtoolStatistics out;
    out.reserve(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      const char* name = reinterpret_cast<const char*>(gstrings->data + i * ETH_GSTRING_LEN);
      out.emplace_back(std::string(name, strnlen(name, ETH_GSTRING_LEN)), stats->data[i]);
    }
    return out;
  }
};

bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

class EthtoolCollector final : public Collector {
 public:
  EthtoolCollector(bool all_statistics, std::shared_ptr<const EthtoolSource> source)
      : all_statistics_(all_statistics), source_(std::move(source)) {}

  std::string_view name() const override { return kEthtoolCollector; }

  void collect(const Device& device, MetricSet& out, ErrorSink& errors) const override {
    for (const auto& port : device.ports) {
      const std::string netdev = roce_netdev(port);
      if (netdev.empty()) continue;
      const auto read = source_->statistics(netdev);
      if (!read) {
        const int error = read.error().value();
        errors.record(classify_errno(error), "netdev " + netdev + " (SIOCETHTOOL ETHTOOL_GSTATS: " +
                                                 std::strerror(error) + ")");
        continue;
      }
      const auto identity =
          out.label_set({{"device", device.name}, {"port", port.number}, {"netdev", netdev}});
      std::set<std::string> used;
      for (const auto& [stat, value] : *read) {
        if (!all_statistics_ && !is_roce_ethtool_statistic(stat)) continue;
        // Some drivers repeat a name; a repeated series would make the page invalid.
        std::string label = stat;
        for (int suffix = 2; !used.insert(label).second; ++suffix) {
          label = stat + "_" + std::to_string(suffix);
        }
        out.add("rdma_port_ethtool_stat_total",
                "Ethernet statistic of a RoCE port's netdev, as `ethtool -S` names it (by "
                "default the RoCE ones: pause frames and duration per priority, PFC storm and "
                "watchdog, discards, drops, out of buffer, physical-layer errors).",
                prometheus::MetricType::Counter, identity, {{"stat", label}},
                static_cast<double>(value));
      }
    }
  }

 private:
  bool all_statistics_;
  std::shared_ptr<const EthtoolSource> source_;
};

}  // namespace

std::shared_ptr<const EthtoolSource> make_ioctl_ethtool_source() {
  return std::make_shared<IoctlEthtoolSource>();
}

bool is_roce_ethtool_statistic(std::string_view name) {
  static constexpr std::array kParts = {
      "pause",    "pfc",     "prio", "xoff",          "xon",    "storm",
      "watchdog", "discard", "drop", "out_of_buffer", "no_buf",
  };
  for (std::string_view part : kParts) {
    if (contains(name, part)) return true;
  }
  return is_physical_error_statistic(name);
}

bool is_physical_error_statistic(std::string_view name) {
  // mlx5's port counters end in _phy (en_stats.c: the PPCNT groups IEEE 802.3, RFC 2863,
  // RFC 2819, physical layer and physical layer statistical); the error ones say so in their
  // names (err, corrected, link_down) or count malformed frames. Traffic (rx_bytes_phy,
  // rx_64_bytes_phy...), MAC control frames and rx_out_of_range_len_phy (length fields above
  // the maximum: Ethernet type fields are not counted there) are not errors of the link.
  static constexpr std::array kErrorParts = {
      "err", "corrected", "link_down", "undersize", "oversize", "fragments", "jabbers",
  };
  if (!name.ends_with("_phy")) return false;
  for (std::string_view part : kErrorParts) {
    if (contains(name, part)) return true;
  }
  return false;
}

std::optional<std::uint32_t> ethtool_priority(std::string_view name) {
  // Longest spelling first: "priority_3" must not read as "prio" followed by "r".
  static constexpr std::array<std::string_view, 3> kSpellings = {"priority_", "prio", "pri"};
  for (std::size_t at = 0; at < name.size(); ++at) {
    // A word of its own: the start, or after '_' or '.' (i40e's "port." prefix).
    if (at > 0 && name[at - 1] != '_' && name[at - 1] != '.') continue;
    for (const auto spelling : kSpellings) {
      if (!name.substr(at).starts_with(spelling)) continue;
      const std::size_t digit = at + spelling.size();
      if (digit >= name.size() || name[digit] < '0' || name[digit] > '7') continue;
      if (digit + 1 < name.size() && name[digit + 1] != '_') continue;
      return static_cast<std::uint32_t>(name[digit] - '0');
    }
  }
  return std::nullopt;
}

std::string_view ethtool_priority_class(std::string_view name) {
  // mlx5's rx_prio3_marked: packets the port ECN-marked in that priority's queue.
  for (std::string_view part : {"pause", "pfc", "xon", "xoff", "marked"}) {
    if (contains(name, part)) return "congestion";
  }
  for (std::string_view part : {"discard", "drop"}) {
    if (contains(name, part)) return "error";
  }
  return "informative";
}

std::unique_ptr<Collector> make_ethtool_collector(bool all_statistics,
                                                  std::shared_ptr<const EthtoolSource> source) {
  return std::make_unique<EthtoolCollector>(all_statistics, std::move(source));
}

}  // namespace ibprobe::collectors
