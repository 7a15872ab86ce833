// The cabling plan (--fabric.topology-file), both formats. A refusal names a line of the input;
// an accepted plan has ports 1-254, a name or GUID at every end, no end planned twice, and
// against an empty fabric every planned cable is missing and nothing else is reported.
#include "ibprobe/fabric_topology.h"

#include <algorithm>
#include <set>
#include <string>

#include "fuzz.h"
#include "ibprobe/fabric.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ibprobe::fabric;
  const auto text = ibprobe::fuzz::text(data, size);
  const auto plan = parse_topology(text);
  if (!plan) {
    const auto& why = plan.error().message;
    FUZZ_CHECK(plan.error().kind == ErrorKind::kTopologyFile, "wrong kind: %s", why.c_str());
    FUZZ_CHECK(why.starts_with("line "), "refusal without a line: %s", why.c_str());
    const long line = std::stol(why.substr(5));
    const long lines = static_cast<long>(std::count(text.begin(), text.end(), '\n')) + 1;
    FUZZ_CHECK(line >= 1 && line <= lines, "line %ld of %ld lines: %s", line, lines, why.c_str());
    return 0;
  }
  std::set<std::pair<std::string, int>> ends;
  for (const auto& cable : plan->cables) {
    for (const auto* end : {&cable.node, &cable.remote}) {
      FUZZ_CHECK(end->port >= 1 && end->port <= 254, "port %d", end->port);
      FUZZ_CHECK(!end->name.empty() || end->guid, "an end with neither name nor GUID");
      const auto key = (end->guid ? format_guid(*end->guid) : "") + "/" + end->name;
      FUZZ_CHECK(ends.insert({key, end->port}).second, "%s port %d planned twice", key.c_str(),
                 end->port);
    }
  }
  const auto reports = compare_topology(*plan, FabricModel{});
  FUZZ_CHECK(reports.size() == plan->cables.size(), "%zu reports for %zu cables", reports.size(),
             plan->cables.size());
  for (const auto& report : reports) {
    FUZZ_CHECK(report.status == CableStatus::kMissing, "%s against an empty fabric",
               std::string(to_string(report.status)).c_str());
  }
  return 0;
}
