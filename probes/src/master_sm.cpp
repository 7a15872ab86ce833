#include "ibprobe/master_sm.h"

#include <cstdio>

#include "ibprobe/fabric_discovery.h"

namespace ibprobe::probes {

MasterSmCheck check_master_sm(const std::string& device, int port, std::uint16_t sm_lid,
                              std::chrono::milliseconds timeout, int retries) {
  if (sm_lid == 0) return {true, false, "the port has no SM LID: no subnet manager configured it"};
  fabric::DiscoveryOptions options;
  options.ca = device;
  options.ca_port = port;
  options.timeout = timeout;
  options.retries = retries;
  const auto answers = fabric::query_subnet_managers(options, sm_lid, {});
  if (!answers) return {false, false, "SMInfo not asked: " + answers.error().message};
  const std::string at = "lid " + std::to_string(sm_lid);
  if (answers->empty()) {
    return {true, false,
            "no subnet manager answered SMInfo at the port's SM " + at +
                " (the SM that configured the port is gone)"};
  }
  const auto& sm = answers->front();
  char guid[24];
  std::snprintf(guid, sizeof(guid), "0x%016llx", static_cast<unsigned long long>(sm.guid));
  const std::string facts = at + ", guid " + guid + ", priority " + std::to_string(sm.priority) +
                            ", ActCount " + std::to_string(sm.activity_count);
  if (sm.state != fabric::SmState::kMaster) {
    return {true, false,
            "the SM at the port's SM " + at + " is " + std::string(fabric::to_string(sm.state)) +
                ", not master (" + facts + ")"};
  }
  return {true, true, "master SM at " + facts};
}

}  // namespace ibprobe::probes
