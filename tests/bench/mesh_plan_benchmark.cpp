// The time one exporter spends computing its mesh plan, on the fabrics of the simulation:
// indexing the peer list (once per change of the list) and planning one host (once per epoch).
#include <benchmark/benchmark.h>

#include "ibprobe/mesh_plan.h"
#include "mesh_fabrics.h"

namespace {

using namespace ibprobe;

void BM_IndexPeerList(benchmark::State& state) {
  const auto peers = testing::uniform_mesh_fabric(500, 20);
  for (auto _ : state) {
    mesh::MeshFabric fabric(peers);
    benchmark::DoNotOptimize(fabric);
  }
}
BENCHMARK(BM_IndexPeerList)->Unit(benchmark::kMillisecond);

void plan_one_host(benchmark::State& state, const mesh::MeshFabric& fabric) {
  std::int64_t epoch = 0;
  const mesh::MeshPolicy policy;
  std::size_t self = 0;
  for (auto _ : state) {
    auto plan = mesh::plan_mesh(
        fabric, self, std::chrono::system_clock::time_point(std::chrono::seconds(epoch * 600)),
        policy);
    benchmark::DoNotOptimize(plan);
    self = (self + 7919) % fabric.peers().size();
    ++epoch;
  }
}

void BM_PlanOneHost_Uniform10k(benchmark::State& state) {
  static const mesh::MeshFabric fabric(testing::uniform_mesh_fabric(500, 20));
  plan_one_host(state, fabric);
}
BENCHMARK(BM_PlanOneHost_Uniform10k)->Unit(benchmark::kMicrosecond);

void BM_PlanOneHost_Uneven10k(benchmark::State& state) {
  static const mesh::MeshFabric fabric(testing::uneven_mesh_fabric());
  plan_one_host(state, fabric);
}
BENCHMARK(BM_PlanOneHost_Uneven10k)->Unit(benchmark::kMicrosecond);

void BM_PlanOneHost_Unlabelled10k(benchmark::State& state) {
  static const mesh::MeshFabric fabric(testing::unlabelled_mesh_fabric(10000));
  plan_one_host(state, fabric);
}
BENCHMARK(BM_PlanOneHost_Unlabelled10k)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
