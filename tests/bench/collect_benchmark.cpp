// Where a scrape's time goes: collecting from sysfs versus serializing, per collector, on the
// benchmark tree of 8 dual-port HCAs; and the text format writers side by side.
#include <benchmark/benchmark.h>
#include <prometheus/text_serializer.h>

#include <sstream>

#include "ibprobe/collectors.h"
#include "sysfs_fixture.h"

namespace {

using namespace ibprobe;

const testing::SysfsTree& tree() {
  static const auto* instance = [] {
    auto* t = new testing::SysfsTree();
    for (int i = 0; i < 8; ++i) {
      t->add(testing::mlx5_ib_device("mlx5_" + std::to_string(i), 2, static_cast<unsigned>(i)));
    }
    return t;
  }();
  return *instance;
}

collectors::Scraper make(const std::vector<std::string>& names, int parallelism = 1) {
  collectors::Options options;
  options.sysfs_root = tree().root();
  options.parallelism = parallelism;
  std::vector<std::unique_ptr<collectors::Collector>> list;
  for (const auto& name : names) list.push_back(collectors::make_collector(name));
  return collectors::Scraper(options, std::move(list));
}

std::vector<std::string> all_names() {
  std::vector<std::string> names;
  for (const auto& info : collectors::available_collectors()) names.emplace_back(info.name);
  return names;
}

void BM_Collector(benchmark::State& state, std::string name) {
  auto scraper = make({name});
  for (auto _ : state) benchmark::DoNotOptimize(scraper.scrape_set());
}

void BM_ScrapeAll(benchmark::State& state) {
  auto scraper = make(all_names(), static_cast<int>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(scraper.scrape_set());
}

void BM_SerializePrometheusCpp(benchmark::State& state) {
  auto scraper = make(all_names());
  const auto families = scraper.scrape();
  for (auto _ : state) {
    std::ostringstream out;
    prometheus::TextSerializer().Serialize(out, families);
    benchmark::DoNotOptimize(out.str());
  }
}

// What the metrics page does: the metric set writes itself.
void BM_SerializeMetricSet(benchmark::State& state) {
  auto scraper = make(all_names());
  const auto metrics = scraper.scrape_set();
  for (auto _ : state) {
    std::string out;
    metrics.append_text(out);
    benchmark::DoNotOptimize(out);
  }
}

BENCHMARK_CAPTURE(BM_Collector, port_counters, std::string("port_counters"));
BENCHMARK_CAPTURE(BM_Collector, hw_counters, std::string("hw_counters"));
BENCHMARK_CAPTURE(BM_Collector, port_info, std::string("port_info"));
BENCHMARK_CAPTURE(BM_Collector, gids, std::string("gids"));
BENCHMARK_CAPTURE(BM_Collector, port_events, std::string("port_events"));
// CPU time of the whole process, so that the pool threads' work counts.
BENCHMARK(BM_ScrapeAll)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->UseRealTime()
    ->MeasureProcessCPUTime();
BENCHMARK(BM_SerializePrometheusCpp);
BENCHMARK(BM_SerializeMetricSet);

}  // namespace

BENCHMARK_MAIN();
