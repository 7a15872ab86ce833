// What a driver's hw_counters mean: the class of each name the kernel drivers of RoCE and
// iWARP NICs publish (mlx5, rxe, irdma, bnxt_re, efa, hns), so error-class counters can join the
// error view and a probe's verdict. The table, with the driver source of every entry, is in
// hw_counter_classes.cpp and in docs/metrics.md.
#pragma once

#include <string_view>

namespace ibprobe::collectors {

enum class HwCounterClass {
  kInformative,       // traffic, resources, or a name the table does not know
  kRetransmission,    // packets sent again, or duplicates received, or retries used up
  kSequenceError,     // out-of-sequence packets, sequence-error NAKs
  kAckTimeout,        // the local ACK timer expired (retransmission after a timeout)
  kRnrNak,            // receiver-not-ready NAKs sent or received: no receive was posted
  kRnrRetryExceeded,  // RNR retries used up: the QP went to error
  kRemoteError,       // remote access and remote operation errors (bad rkey, bad request)
  kOutOfBuffer,       // packets dropped for lack of a receive buffer
  kCongestion,        // CNPs sent and handled, ECN-marked packets: congestion control at work
};

// The `class` label value: "informative", "retransmission", "sequence_error", "ack_timeout",
// "rnr_nak", "rnr_retry_exceeded", "remote_error", "out_of_buffer", "congestion".
std::string_view to_string(HwCounterClass counter_class);

// Classes whose increase is a finding on a healthy link. Congestion counters are not: CNPs and
// ECN marks are the congestion control loop doing its job, and their rate is what to watch.
constexpr bool is_error_class(HwCounterClass counter_class) {
  return counter_class != HwCounterClass::kInformative &&
         counter_class != HwCounterClass::kCongestion;
}

// Class of an hw_counters file by the name the driver gives it (as in sysfs, unsanitized).
// Unknown names are informative: a class is never guessed from a name's look.
HwCounterClass classify_hw_counter(std::string_view name);

}  // namespace ibprobe::collectors
