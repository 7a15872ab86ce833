// Whether the subnet manager that configured an InfiniBand port is still there and master. A
// port keeps the SM LID it was given after the SM dies, so the port's own facts cannot say; no
// benchmark is meaningful without a running SM (perftest's README), and a fabric without one
// stops healing the moment a link flaps. The question is asked as infiniband-diags' `sminfo`
// asks it: SMInfo from the port's SM LID.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ibprobe::probes {

struct MasterSmCheck {
  // False when the question could not be asked (the port's MAD device cannot be opened): the
  // detail says why, and nothing is claimed about the SM.
  bool applicable = true;
  bool passed = false;
  std::string detail;
};

// SMInfo from `sm_lid` through `device` port `port` (a umad device, named as the verbs device),
// each query waiting `timeout` and retried `retries` times. Passes when the SM there answers as
// master; the detail names its LID, port GUID, priority and ActCount, or says what answered
// instead (nobody, or an SM in another state). An `sm_lid` of 0 fails without asking: no SM has
// configured the port.
MasterSmCheck check_master_sm(const std::string& device, int port, std::uint16_t sm_lid,
                              std::chrono::milliseconds timeout, int retries);

}  // namespace ibprobe::probes
