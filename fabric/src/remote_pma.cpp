// Remote port counters over PerfMgt MADs: per target LID, ClassPortInfo tells which counters the
// PMA has (extended 64-bit table, PortXmitWait, AllPortSelect) and NodeInfo names the node and
// counts its ports; then PortCounters and PortCountersExtended of each asked port, and on request
// the detail attributes of PMAs that have not answered "not supported". Exported in the
// port_counters families, labelled by lid and port instead of device.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <mutex>

#include "ibprobe/fabric.h"
#include "ibprobe/port_counter_table.h"
#include "mad_exchange.h"
#include "pma_mad.h"
#include "remote_pma_internal.h"

namespace ibprobe::fabric {

using collectors::add_counter_sample;
using collectors::add_saturation_sample;
using collectors::CounterSpec;
using collectors::ErrorSink;
using collectors::FabricCollector;
using collectors::find_port_counter;
using collectors::kTableWidth;
using collectors::MetricSet;
using collectors::ReadError;
using collectors::saturation_value;
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint16_t kMaxUnicastLid = 0xBFFF;
constexpr unsigned kMaxPortNumber = 254;

struct NodeFacts {
  std::optional<mad::ClassPortInfo> class_port_info;
  std::optional<mad::NodeInfo> node_info;
};

// Sums one attribute's counters over the answers of every asked port; nullopt unless all of them
// answered (a partial sum would read as a counter going down).
template <typename Decode>
std::optional<std::map<std::string, RemoteCounter, std::less<>>> sum_decoded(
    const std::vector<std::optional<std::vector<std::uint8_t>>>& answers, const Decode& decode) {
  std::map<std::string, RemoteCounter, std::less<>> sums;
  for (const auto& answer : answers) {
    if (!answer) return std::nullopt;
    for (const auto& [counter, value, width] : decode(mad::data_of(*answer))) {
      auto [it, inserted] = sums.try_emplace(std::string(counter), RemoteCounter{value, width});
      if (!inserted) it->second.value = saturating_add(it->second.value, value, width);
    }
  }
  return sums;
}

std::optional<std::map<std::string, RemoteCounter, std::less<>>> sum_counters(
    const std::vector<std::optional<std::vector<std::uint8_t>>>& answers,
    std::span<const mad::CounterField> fields) {
  return sum_decoded(answers, [&](std::span<const std::uint8_t> data) {
    return mad::decode_counters(data, fields);
  });
}

std::string port_label(const RemotePort& target) {
  return target.port ? std::to_string(*target.port) : "all";
}

class RemotePmaFabricCollector final : public FabricCollector {
 public:
  RemotePmaFabricCollector(RemotePmaOptions options, UmadOpenResult port)
      : options_(std::move(options)), port_(std::move(port)) {}

  std::string_view name() const override { return kRemotePmaCollector; }

  void collect(MetricSet& out, ErrorSink& errors) const override {
    constexpr std::string_view kUpHelp =
        "1 when the remote_pma collector has a local InfiniBand port with a umad device to send "
        "PerfMgt MADs from; 0 with the reason when it has none (RoCE, rxe, no IB stack).";
    if (!port_.transport) {
      out.add("ibprobe_remote_pma_up", kUpHelp, prometheus::MetricType::Gauge,
              {{"reason", port_.reason}}, 0);
      return;
    }
    out.add("ibprobe_remote_pma_up", kUpHelp, prometheus::MetricType::Gauge,
            {{"ca", port_.ca}, {"ca_port", std::to_string(port_.port)}}, 1);
    // One umad agent answers one scrape at a time; an overlapping scrape waits its turn.
    std::vector<RemotePortCounters> results;
    {
      std::lock_guard lock(mutex_);
      results = query_remote_ports(*port_.transport, options_, errors, detail_support_);
    }
    for (const auto& result : results) {
      MetricSet::Labels labels{{"lid", std::to_string(result.target.lid)},
                               {"port", port_label(result.target)}};
      if (result.node_guid) labels.emplace_back("node_guid", format_guid(*result.node_guid));
      add_counter_series(out, out.label_set(labels), result.counters);
    }
  }

 private:
  RemotePmaOptions options_;
  UmadOpenResult port_;
  mutable std::mutex mutex_;
  mutable std::map<std::uint16_t, DetailSupports> detail_support_;  // by LID, under mutex_
};

}  // namespace

void add_counter_series(MetricSet& out, MetricSet::LabelSet identity,
                        const std::map<std::string, RemoteCounter, std::less<>>& counters) {
  for (const auto& [counter, sample] : counters) {
    if (const CounterSpec* spec = find_port_counter(counter, false)) {
      add_counter_sample(out, *spec, identity, sample.value);
    } else if (const auto vl = mad::vl_of_xmit_wait(counter)) {
      out.add("rdma_port_vl_transmit_wait_ticks_total",
              "Ticks during which the port had data to send on the virtual lane but sent none "
              "(PortVLXmitWaitCounters: which VL waits for credits). 16 bit, saturates.",
              prometheus::MetricType::Counter, identity, {{"vl", std::to_string(*vl)}},
              static_cast<double>(sample.value));
    }
  }
  for (const auto& [counter, sample] : counters) {
    if (sample.width >= 64) continue;
    add_saturation_sample(out, counter, identity, sample.value == saturation_value(sample.width));
  }
}

void add_detail_queries(std::uint16_t lid, std::uint8_t port, const DetailSupports& support,
                        DetailPlan& plan, std::vector<MadQuery>& queries) {
  for (std::size_t a = 0; a < mad::kDetailAttributes.size(); ++a) {
    if (support[a] == DetailSupport::kUnsupported) continue;
    plan[a].push_back(queries.size());
    queries.push_back({lid, mad::MgmtClass::kPerfMgt, mad::kDetailAttributes[a], port, true});
  }
}

void take_detail_answers(const DetailPlan& plan, const std::vector<MadExchange::Answer>& answers,
                         const MadExchange& exchange, DetailSupports& support,
                         std::map<std::string, RemoteCounter, std::less<>>& counters) {
  for (std::size_t a = 0; a < plan.size(); ++a) {
    if (plan[a].empty()) continue;
    std::vector<MadExchange::Answer> asked;
    for (const auto q : plan[a]) {
      if (exchange.unsupported(q)) support[a] = DetailSupport::kUnsupported;
      if (answers[q] && support[a] == DetailSupport::kUnknown)
        support[a] = DetailSupport::kSupported;
      asked.push_back(answers[q]);
    }
    if (support[a] != DetailSupport::kSupported) continue;
    const auto attribute = mad::kDetailAttributes[a];
    auto sums = sum_decoded(asked, [&](std::span<const std::uint8_t> data) {
      return mad::decode_detail_counters(attribute, data);
    });
    if (sums) counters.merge(*sums);
  }
}

bool has_extended_counters(const mad::ClassPortInfo& info) {
  return info.capability_mask & (mad::kCapExtendedWidth | mad::kCapExtendedWidthNoIetf);
}

// Which counters of each table a PMA really fills: the 32-bit data and packet counters give
// way to the extended ones, PortXmitWait needs its capability bit, and the unicast/multicast
// counters are absent from the "no IETF" extended table.
void drop_unsupported_basic(const mad::ClassPortInfo& info,
                            std::map<std::string, RemoteCounter, std::less<>>& counters) {
  std::erase_if(counters, [&](const auto& entry) {
    if (entry.first == "port_xmit_wait") return !(info.capability_mask & mad::kCapPortXmitWait);
    const CounterSpec* spec = find_port_counter(entry.first, false);
    return has_extended_counters(info) && spec && spec->width == kTableWidth;
  });
}

void drop_unsupported_extended(const mad::ClassPortInfo& info,
                               std::map<std::string, RemoteCounter, std::less<>>& counters) {
  if (info.capability_mask & mad::kCapExtendedWidth) return;
  std::erase_if(counters, [](const auto& entry) {
    return entry.first.starts_with("unicast_") || entry.first.starts_with("multicast_");
  });
}

// As the kernel prints node_guid in sysfs, so remote and local series join on it.
std::string format_guid(std::uint64_t guid) {
  char text[20];
  std::snprintf(text, sizeof text, "%04x:%04x:%04x:%04x", static_cast<unsigned>(guid >> 48),
                static_cast<unsigned>(guid >> 32 & 0xFFFF),
                static_cast<unsigned>(guid >> 16 & 0xFFFF), static_cast<unsigned>(guid & 0xFFFF));
  return text;
}

std::optional<RemotePort> parse_remote_port(std::string_view text) {
  const auto colon = text.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  auto number = [](std::string_view digits, unsigned max) -> std::optional<unsigned> {
    int base = 10;
    if (digits.starts_with("0x") || digits.starts_with("0X")) {
      digits.remove_prefix(2);
      base = 16;
    }
    unsigned value = 0;
    const auto [end, ec] =
        std::from_chars(digits.data(), digits.data() + digits.size(), value, base);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() ||
        value > max) {
      return std::nullopt;
    }
    return value;
  };
  const auto lid = number(text.substr(0, colon), kMaxUnicastLid);
  if (!lid || *lid == 0) return std::nullopt;
  RemotePort target{static_cast<std::uint16_t>(*lid), std::nullopt};
  const auto port_text = text.substr(colon + 1);
  if (port_text == "all") return target;
  const auto port = number(port_text, kMaxPortNumber);
  if (!port) return std::nullopt;
  target.port = static_cast<std::uint8_t>(*port);
  return target;
}

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b, int width) {
  const std::uint64_t max = saturation_value(width);
  return b > max - std::min(a, max) ? max : a + b;
}

std::vector<RemotePortCounters> query_remote_ports(
    MadTransport& transport, const RemotePmaOptions& options, ErrorSink& errors,
    std::map<std::uint16_t, DetailSupports>& support) {
  const ExchangeLimits limits{options.timeout, options.retries, options.budget,
                              options.concurrency};
  MadExchange exchange(transport, limits, Clock::now() + options.budget, errors);

  // First what each target node's PMA supports, and who it is.
  std::vector<std::uint16_t> lids;
  for (const auto& target : options.targets) {
    if (std::find(lids.begin(), lids.end(), target.lid) == lids.end()) lids.push_back(target.lid);
  }
  std::vector<MadQuery> node_queries;
  for (const auto lid : lids) {
    node_queries.push_back({lid, mad::MgmtClass::kPerfMgt, mad::Attribute::kClassPortInfo});
    if (transport.sends_smps()) {
      node_queries.push_back({lid, mad::MgmtClass::kSubnLidRouted, mad::Attribute::kNodeInfo});
    }
  }
  const auto node_answers = exchange.run(node_queries);
  std::map<std::uint16_t, NodeFacts> nodes;
  for (std::size_t q = 0; q < node_queries.size(); ++q) {
    if (!node_answers[q]) continue;
    const auto data = mad::data_of(*node_answers[q]);
    auto& facts = nodes[node_queries[q].lid];
    if (node_queries[q].attribute == mad::Attribute::kClassPortInfo) {
      facts.class_port_info = mad::decode_class_port_info(data);
    } else {
      facts.node_info = mad::decode_node_info(data);
    }
  }

  // Then the counters: one PortSelect per asked port, or 0xFF for the node's sum when the PMA
  // can add them up itself; otherwise every port of the node, summed here.
  struct Plan {
    std::size_t target;
    std::vector<std::size_t> basic;
    std::vector<std::size_t> extended;
    DetailPlan details;
  };
  std::vector<Plan> plans;
  std::vector<MadQuery> counter_queries;
  for (std::size_t t = 0; t < options.targets.size(); ++t) {
    const auto& target = options.targets[t];
    const auto& facts = nodes[target.lid];
    if (!facts.class_port_info) continue;  // its failure is already counted
    std::vector<std::uint8_t> ports;
    if (target.port) {
      ports.push_back(*target.port);
    } else if (facts.class_port_info->capability_mask & mad::kCapAllPortSelect) {
      ports.push_back(mad::kAllPorts);
    } else if (facts.node_info) {
      for (unsigned p = 1; p <= facts.node_info->num_ports; ++p) {
        ports.push_back(static_cast<std::uint8_t>(p));
      }
    } else {
      if (!transport.sends_smps()) {
        errors.record(ReadError::kNotSupported,
                      "lid " + std::to_string(target.lid) +
                          " all ports: the PMA has no AllPortSelect and NodeInfo (the port "
                          "count) cannot be asked without an SMI agent");
      }
      continue;
    }
    Plan plan{t, {}, {}, {}};
    const bool extended = has_extended_counters(*facts.class_port_info);
    for (const auto port : ports) {
      plan.basic.push_back(counter_queries.size());
      counter_queries.push_back(
          {target.lid, mad::MgmtClass::kPerfMgt, mad::Attribute::kPortCounters, port});
      if (options.detail_counters) {
        add_detail_queries(target.lid, port, support[target.lid], plan.details, counter_queries);
      }
      if (!extended) continue;
      plan.extended.push_back(counter_queries.size());
      counter_queries.push_back(
          {target.lid, mad::MgmtClass::kPerfMgt, mad::Attribute::kPortCountersExtended, port});
    }
    plans.push_back(std::move(plan));
  }
  const auto counter_answers = exchange.run(counter_queries);

  std::vector<RemotePortCounters> results;
  for (const auto& target : options.targets) results.push_back({target, std::nullopt, {}});
  for (const auto& plan : plans) {
    auto& result = results[plan.target];
    const auto& facts = nodes[result.target.lid];
    if (facts.node_info) result.node_guid = facts.node_info->node_guid;
    auto pick = [&](const std::vector<std::size_t>& indexes) {
      std::vector<std::optional<std::vector<std::uint8_t>>> answers;
      for (const auto i : indexes) answers.push_back(counter_answers[i]);
      return answers;
    };
    auto basic = sum_counters(pick(plan.basic), mad::port_counters_fields());
    auto extended = plan.extended.empty()
                        ? std::nullopt
                        : sum_counters(pick(plan.extended), mad::port_counters_extended_fields());
    if (basic) {
      drop_unsupported_basic(*facts.class_port_info, *basic);
      result.counters.merge(*basic);
    }
    if (extended) {
      drop_unsupported_extended(*facts.class_port_info, *extended);
      result.counters.merge(*extended);
    }
    take_detail_answers(plan.details, counter_answers, exchange, support[result.target.lid],
                        result.counters);
  }
  return results;
}

std::unique_ptr<FabricCollector> make_remote_pma_collector(RemotePmaOptions options,
                                                           UmadOpenResult port) {
  return std::make_unique<RemotePmaFabricCollector>(std::move(options), std::move(port));
}

RemotePmaCollector make_remote_pma_collector(RemotePmaOptions options) {
  auto port = open_umad_transport(options.ca, options.ca_port);
  std::string unavailable =
      port.transport ? std::string() : port.detail + " (reason " + port.reason + ")";
  return {make_remote_pma_collector(std::move(options), std::move(port)), std::move(unavailable)};
}

std::expected<std::vector<RemotePortCounters>, Error> snapshot_remote_ports(
    const RemotePmaOptions& options, ErrorSink& errors) {
  const auto port = open_umad_transport(options.ca, options.ca_port);
  if (!port.transport) {
    return std::unexpected(Error{ErrorKind::kLocalPort, "remote PMA unavailable: " + port.detail});
  }
  std::map<std::uint16_t, DetailSupports> support;
  return query_remote_ports(*port.transport, options, errors, support);
}

}  // namespace ibprobe::fabric
