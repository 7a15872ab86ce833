#include "detail_memory.h"

#include <set>

namespace ibprobe::fabric {
namespace {

std::optional<RemoteCounter> base_of(const CounterMap& counters, std::size_t attribute) {
  const auto it = counters.find(kDetailBases[attribute]);
  if (it == counters.end()) return std::nullopt;
  return it->second;
}

bool saturated(const RemoteCounter& counter) {
  return counter.width < 64 && counter.value >= (std::uint64_t{1} << counter.width) - 1;
}

}  // namespace

DetailChoice details_to_read(const PortDetails& kept, const CounterMap& now) {
  bool reset = false;
  for (std::size_t a = 0; a < kept.size(); ++a) {
    const auto base = base_of(now, a);
    if (kept[a] && kept[a]->base && base && base->value < *kept[a]->base) reset = true;
  }
  DetailChoice read{};
  for (std::size_t a = 0; a < kept.size(); ++a) {
    const auto base = base_of(now, a);
    read[a] = reset || !kept[a] || !kept[a]->base || !base || base->value != *kept[a]->base ||
              saturated(*base);
  }
  return read;
}

void keep_model_ports(DetailMemory& memory, const FabricModel& model) {
  std::set<std::pair<std::uint64_t, int>> ports;
  for (const auto& node : model.nodes) {
    if (node.type != FabricNodeType::kSwitch) continue;
    for (const auto& port : node.ports) ports.emplace(node.guid, port.number);
  }
  std::erase_if(memory, [&](const auto& entry) { return !ports.contains(entry.first); });
}

}  // namespace ibprobe::fabric
