// Remote port counters over PerfMgt MADs: per target LID, ClassPortInfo tells which counters the
// PMA has (extended 64-bit table, PortXmitWait, AllPortSelect) and NodeInfo names the node and
// counts its ports; then PortCounters and PortCountersExtended of each asked port, and on request
// the detail attributes of PMAs that have not answered "not supported". Exported in the
// port_counters families, labelled by lid and port instead of device.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <mutex>

#include "ibprobe/fabric.h"
#include "ibprobe/fec_statistics.h"
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
    std::vector<std::optional<mad::ExtendedSpeedsCounters>> extended_speeds;
    std::map<std::uint16_t, FecCountersSupport> fec_support;
    {
      std::lock_guard lock(mutex_);
      results = query_remote_ports(*port_.transport, options_, errors, memory_, &extended_speeds);
      fec_support = memory_.fec;
    }
    for (std::size_t t = 0; t < results.size(); ++t) {
      const auto& result = results[t];
      MetricSet::Labels labels{{"lid", std::to_string(result.target.lid)},
                               {"port", port_label(result.target)}};
      if (result.node_guid) labels.emplace_back("node_guid", format_guid(*result.node_guid));
      const auto identity = out.label_set(labels);
      add_counter_series(out, identity, result.counters);
      // No lane count without PortInfo: every lane of the attribute.
      if (t < extended_speeds.size() && extended_speeds[t]) {
        add_fec_series(out, identity, *extended_speeds[t], mad::kFecLanes);
      }
    }
    for (const auto& [lid, support] : fec_support) {
      add_fec_status(out, lid, support);
    }
  }

 private:
  RemotePmaOptions options_;
  UmadOpenResult port_;
  mutable std::mutex mutex_;
  mutable RemotePmaMemory memory_;  // under mutex_

  static void add_fec_status(MetricSet& out, std::uint16_t lid, const FecCountersSupport& support) {
    add_fec_support_sample(
        out, "rdma_remote_pma_fec_counters_up",
        "1 when the PMA at `lid` answers PortExtendedSpeedsCounters (FEC counters); 0 with "
        "`reason` when it is not asked again while the exporter runs: not_supported (the PMA "
        "said so), no_answer (it answered PortCounters but not it).",
        {{"lid", std::to_string(lid)}}, support);
  }
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

void add_fec_series(MetricSet& out, MetricSet::LabelSet identity,
                    const mad::ExtendedSpeedsCounters& counters, std::size_t lanes) {
  constexpr auto kCounter = prometheus::MetricType::Counter;
  constexpr int kLaneWidth = 32;
  lanes = std::min(lanes, mad::kFecLanes);
  auto add_lanes = [&](std::string_view family, std::string_view help, const auto& values) {
    for (std::size_t lane = 0; lane < lanes; ++lane) {
      out.add(family, help, kCounter, identity, {{"lane", std::to_string(lane)}},
              static_cast<double>(values[lane]));
    }
  };
  auto flag = [&](std::string_view counter, bool saturated) {
    add_saturation_sample(out, counter, identity, saturated);
  };
  // Totals over every lane: a lane the port does not use counts nothing.
  auto total = [](const auto& values) {
    std::uint64_t sum = 0;
    for (const auto value : values) sum += value;
    return sum;
  };
  auto any_saturated = [](const auto& values, int width) {
    return std::any_of(values.begin(), values.end(),
                       [&](auto value) { return value == saturation_value(width); });
  };
  const std::uint64_t max32 = saturation_value(kLaneWidth);
  if (counters.layout == mad::FecLayout::kRsFec) {
    using collectors::kFecCorrectedBlocks;
    using collectors::kFecUncorrectableBlocks;
    out.add(kFecCorrectedBlocks.total, kFecCorrectedBlocks.help, kCounter, identity,
            counters.corrected_blocks);
    out.add(kFecUncorrectableBlocks.total, kFecUncorrectableBlocks.help, kCounter, identity,
            counters.uncorrectable_blocks);
    constexpr std::string_view kSymbolsHelp =
        "RS-FEC symbols the FEC corrected (PortExtendedSpeedsCounters in its RS-FEC layout): each "
        "holds at least one bit error of the line before FEC.";
    out.add("rdma_port_fec_corrected_symbols_total", kSymbolsHelp, kCounter, identity,
            counters.corrected_symbols);
    add_lanes("rdma_port_fec_lane_corrected_symbols_total", kSymbolsHelp, counters.lane_corrected);
    flag("fec_corrected_blocks", counters.corrected_blocks == max32);
    flag("fec_uncorrectable_blocks", counters.uncorrectable_blocks == max32);
    flag("fec_corrected_symbols", counters.corrected_symbols == max32);
    flag("fec_lane_corrected_symbols", any_saturated(counters.lane_corrected, kLaneWidth));
  } else {
    for (const auto& [families, values] :
         {std::pair{collectors::kFecCorrectedBlocks, &counters.lane_corrected},
          std::pair{collectors::kFecUncorrectableBlocks, &counters.lane_uncorrectable_blocks}}) {
      out.add(families.total, families.help, kCounter, identity,
              static_cast<double>(total(*values)));
      add_lanes(families.lane, families.help, *values);
    }
    add_lanes("rdma_port_lane_symbol_errors_total",
              "64b/66b blocks of the lane in which errors were detected "
              "(PortExtendedSpeedsCounters ErrorDetectionCounterLane): symbol errors per lane.",
              counters.lane_error_detections);
    flag("fec_corrected_blocks", any_saturated(counters.lane_corrected, kLaneWidth));
    flag("fec_uncorrectable_blocks", any_saturated(counters.lane_uncorrectable_blocks, kLaneWidth));
    flag("lane_symbol_errors", any_saturated(counters.lane_error_detections, 16));
  }
  out.add("rdma_port_sync_header_errors_total",
          "64b/66b blocks received with an invalid sync header (PortExtendedSpeedsCounters "
          "SyncHeaderErrorCounter).",
          kCounter, identity, counters.sync_header_errors);
  out.add("rdma_port_unknown_blocks_total",
          "64b/66b blocks received with an unknown block type (PortExtendedSpeedsCounters "
          "UnknownBlockCounter).",
          kCounter, identity, counters.unknown_blocks);
  flag("sync_header_errors", counters.sync_header_errors == saturation_value(16));
  flag("unknown_blocks", counters.unknown_blocks == saturation_value(16));
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

void add_fec_support_sample(MetricSet& out, std::string_view family, std::string_view help,
                            MetricSet::Labels labels, const FecCountersSupport& support) {
  if (support.state == FecCountersSupport::State::kUnknown) return;
  const bool up = support.state == FecCountersSupport::State::kSupported;
  if (!up) labels.emplace_back("reason", std::string(support.reason));
  out.add(family, help, prometheus::MetricType::Gauge, labels, up ? 1 : 0);
}

bool learn_fec_support(const std::vector<FecQuery>& queries,
                       const std::vector<MadExchange::Answer>& answers, const MadExchange& exchange,
                       FecCountersSupport& support) {
  using State = FecCountersSupport::State;
  if (support.state != State::kUnknown || queries.empty()) return false;
  bool answered = false;
  bool counters_answered = false;
  for (const auto& [extended_speeds, port_counters] : queries) {
    if (exchange.unsupported(extended_speeds)) {
      support = {State::kUnsupported, "not_supported"};
      return true;
    }
    answered = answered || answers[extended_speeds].has_value();
    counters_answered = counters_answered || answers[port_counters].has_value();
  }
  if (answered) {
    support.state = State::kSupported;
  } else if (counters_answered) {
    support = {State::kUnsupported, "no_answer"};
    return true;
  }
  return false;
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
    RemotePmaMemory& memory,
    std::vector<std::optional<mad::ExtendedSpeedsCounters>>* extended_speeds) {
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

  // The FEC layout of each asked port, once: RS-FEC where the PMA has RS-FEC counters and the
  // port's PortInfoExtended says RS-FEC is active (perfquery's is_rsfec_mode_active); the block
  // layout where the PMA has none or the SMA answers "not supported". No answer: asked again.
  const bool read_fec = options.extended_speeds_counters && extended_speeds;
  if (read_fec) {
    std::vector<MadQuery> layout_queries;
    for (const auto& target : options.targets) {
      const auto& facts = nodes[target.lid];
      if (!target.port || !facts.class_port_info) continue;
      const std::pair key{target.lid, *target.port};
      if (memory.fec_layouts.contains(key)) continue;
      if (!(facts.class_port_info->capability_mask & mad::kCapRsFecCounters) ||
          !transport.sends_smps()) {
        memory.fec_layouts[key] = mad::FecLayout::kBlocks;
        continue;
      }
      layout_queries.push_back({target.lid, mad::MgmtClass::kSubnLidRouted,
                                mad::Attribute::kPortInfoExtended, 0, true, *target.port});
    }
    const auto layout_answers = exchange.run(layout_queries);
    for (std::size_t q = 0; q < layout_queries.size(); ++q) {
      const std::pair key{layout_queries[q].lid,
                          static_cast<std::uint8_t>(layout_queries[q].attribute_modifier)};
      if (layout_answers[q]) {
        memory.fec_layouts[key] = mad::rs_fec_active(mad::data_of(*layout_answers[q]))
                                      ? mad::FecLayout::kRsFec
                                      : mad::FecLayout::kBlocks;
      } else if (exchange.unsupported(q)) {
        memory.fec_layouts[key] = mad::FecLayout::kBlocks;
      }
    }
  }

  // Then the counters: one PortSelect per asked port, or 0xFF for the node's sum when the PMA
  // can add them up itself; otherwise every port of the node, summed here.
  struct Plan {
    std::size_t target;
    std::vector<std::size_t> basic;
    std::vector<std::size_t> extended;
    DetailPlan details;
    std::size_t fec = SIZE_MAX;  // PortExtendedSpeedsCounters, of a target with a port only
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
    Plan plan{t, {}, {}, {}, SIZE_MAX};
    const bool extended = has_extended_counters(*facts.class_port_info);
    for (const auto port : ports) {
      plan.basic.push_back(counter_queries.size());
      counter_queries.push_back(
          {target.lid, mad::MgmtClass::kPerfMgt, mad::Attribute::kPortCounters, port});
      if (options.detail_counters) {
        add_detail_queries(target.lid, port, memory.details[target.lid], plan.details,
                           counter_queries);
      }
      if (read_fec && target.port && memory.fec_layouts.contains({target.lid, port}) &&
          memory.fec[target.lid].state != FecCountersSupport::State::kUnsupported) {
        plan.fec = counter_queries.size();
        counter_queries.push_back({target.lid, mad::MgmtClass::kPerfMgt,
                                   mad::Attribute::kPortExtendedSpeedsCounters, port, true});
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
    take_detail_answers(plan.details, counter_answers, exchange, memory.details[result.target.lid],
                        result.counters);
  }
  if (!read_fec) return results;
  // What each PMA said of PortExtendedSpeedsCounters, over all its asked ports; then the values.
  std::map<std::uint16_t, std::vector<FecQuery>> fec_queries;
  for (const auto& plan : plans) {
    if (plan.fec == SIZE_MAX) continue;
    fec_queries[options.targets[plan.target].lid].push_back({plan.fec, plan.basic.front()});
  }
  for (const auto& [lid, queries] : fec_queries) {
    auto& support = memory.fec[lid];
    if (learn_fec_support(queries, counter_answers, exchange, support)) {
      spdlog::debug("remote_pma: lid {}: PortExtendedSpeedsCounters {}, not asked again", lid,
                    support.reason);
    }
  }
  extended_speeds->assign(options.targets.size(), std::nullopt);
  for (const auto& plan : plans) {
    const auto& target = options.targets[plan.target];
    if (plan.fec == SIZE_MAX || !counter_answers[plan.fec] ||
        memory.fec[target.lid].state != FecCountersSupport::State::kSupported) {
      continue;
    }
    (*extended_speeds)[plan.target] =
        mad::decode_extended_speeds_counters(mad::data_of(*counter_answers[plan.fec]),
                                             memory.fec_layouts.at({target.lid, *target.port}));
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
  RemotePmaMemory memory;
  return query_remote_ports(*port.transport, options, errors, memory);
}

}  // namespace ibprobe::fabric
