// Populated GID table entries: which index is RoCE v2 / IPv4-mapped on which netdev is what an
// operator needs to pick a GID for perftest or a probe.
#include "ibprobe/gids.h"

#include <mutex>
#include <optional>

#include "devices.h"
#include "sysfs.h"

namespace ibprobe::collectors {
namespace {

constexpr std::string_view kFamily = "rdma_port_gid_info";
constexpr std::string_view kHelp =
    "Populated GID table entry; value is always 1. type is the GID type (IB/RoCE v1, RoCE v2), "
    "netdev the interface it belongs to on RoCE.";

bool is_unset_gid(std::string_view gid) {
  return gid.find_first_not_of("0:") == std::string_view::npos;
}

// Empty table entries read as all zeros on old kernels and fail with EINVAL on new ones.
bool is_empty_entry(ReadError error) {
  return error == ReadError::kInvalid || error == ReadError::kNotFound;
}

std::optional<std::string> read_gid_attr(const SysfsDir& dir, const std::string& index,
                                         ErrorSink& errors) {
  auto text = dir.read_text(index);
  if (text) return std::move(*text);
  if (!is_empty_entry(text.error())) errors.record(text.error(), dir.path() / index);
  return std::nullopt;
}

// What one port's table looked like when last read, kept with its open gids/ directory: a
// device that is registered again is a new tree, and starts with a full read.
class GidTable {
 public:
  // `indices`: the gids/ directory's entries().
  explicit GidTable(const std::vector<std::string>& indices) : indices_(indices) {}

  void emit(const Port& port, const SysfsDir& gids,
            std::chrono::steady_clock::duration rescan_interval, MetricSet& out,
            ErrorSink& errors) const {
    const SysfsDir& types = port.gid_types;
    const SysfsDir& ndevs = port.gid_ndevs;
    // Two scrapes at once read the same table.
    std::lock_guard lock(mutex_);
    const auto now = std::chrono::steady_clock::now();
    if (!scanned_ || now - *scanned_ >= rescan_interval) {
      populated_.clear();
      for (std::size_t position = 0; position < indices_.size(); ++position) {
        Entry entry{indices_[position], position, {}, {}};
        if (refresh(entry, gids, types, ndevs, errors)) populated_.push_back(std::move(entry));
      }
      scanned_ = now;
    } else {
      std::erase_if(populated_,
                    [&](Entry& entry) { return !refresh(entry, gids, types, ndevs, errors); });
    }
    const auto labels = out.rendered_label_set(port.identity_labels);
    for (const auto& entry : populated_) {
      if (entry.readable) {
        out.add_rendered(kFamily, kHelp, prometheus::MetricType::Gauge, labels, entry.labels, 1);
      }
    }
  }

 private:
  struct Entry {
    std::string index;
    std::size_t position;  // of index in the gids/ listing
    std::string gid;
    std::string labels;  // index, gid, type and netdev, rendered
    bool readable = true;
  };

  // Reads the entry's GID again, and its type and netdev when the GID is new; false once the
  // entry is empty.
  static bool refresh(Entry& entry, const SysfsDir& gids, const SysfsDir& types,
                      const SysfsDir& ndevs, ErrorSink& errors) {
    auto gid = gids.read_entry_text(entry.position);
    if (!gid) {
      if (is_empty_entry(gid.error())) return false;
      // Unreadable, not known to be empty: left out of this scrape, asked again on the next.
      errors.record(gid.error(), gids.path() / entry.index);
      entry.readable = false;
      return true;
    }
    entry.readable = true;
    if (is_unset_gid(*gid)) return false;
    if (*gid != entry.gid || entry.labels.empty()) {
      entry.gid = std::move(*gid);
      describe(entry, types, ndevs, errors);
    }
    return true;
  }

  static void describe(Entry& entry, const SysfsDir& types, const SysfsDir& ndevs,
                       ErrorSink& errors) {
    const auto type = read_gid_attr(types, entry.index, errors);
    const auto netdev = read_gid_attr(ndevs, entry.index, errors);
    entry.labels = MetricSet::render_text({{"index", entry.index},
                                           {"gid", entry.gid},
                                           {"type", type.value_or("")},
                                           {"netdev", netdev.value_or("")}});
  }

  const std::vector<std::string> indices_;
  mutable std::mutex mutex_;
  mutable std::optional<std::chrono::steady_clock::time_point> scanned_;
  mutable std::vector<Entry> populated_;
};

class GidsCollector final : public Collector {
 public:
  explicit GidsCollector(std::chrono::steady_clock::duration rescan_interval)
      : rescan_interval_(rescan_interval) {}

  std::string_view name() const override { return kGidsCollector; }

  void collect(const Device& device, MetricSet& out, ErrorSink& errors) const override {
    for (const auto& port : device.ports) {
      const SysfsDir& gids = port.gids;
      const auto& table = gids.from_entries<GidTable>(
          [](const std::vector<std::string>& indices) -> const std::vector<std::string>& {
            return indices;
          });
      table.emit(port, gids, rescan_interval_, out, errors);
    }
  }

 private:
  const std::chrono::steady_clock::duration rescan_interval_;
};

}  // namespace

std::unique_ptr<Collector> make_gids_collector(
    std::chrono::steady_clock::duration rescan_interval) {
  return std::make_unique<GidsCollector>(rescan_interval);
}

}  // namespace ibprobe::collectors
