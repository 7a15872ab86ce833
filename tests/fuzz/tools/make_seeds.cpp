// Writes the committed seed corpora of the binary formats: control frames made by the protocol's
// own encoder (one per message type, with the fields a real run fills in) and MADs as a PMA or
// SMA answers them. Usage: fuzz_make_seeds CORPUS_DIR (tests/fuzz/corpus).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "ibprobe/probes.h"
#include "pma_mad.h"
#include "protocol.h"

namespace {

namespace fs = std::filesystem;
using namespace ibprobe::probes;
using namespace ibprobe::probes::protocol;
namespace mad = ibprobe::fabric::mad;

void write(const fs::path& file, std::span<const std::uint8_t> bytes) {
  fs::create_directories(file.parent_path());
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

void control_frames(const fs::path& dir) {
  auto put = [&](const std::string& name, const Message& message) {
    write(dir / name, encode(message));
  };
  put("hello", Hello{.software_version = "0.1.0"});
  put("hello-challenge", Hello{.software_version = "0.1.0-12-g3e1f0aa",
                               .challenge = Bytes(32, 0x5c),
                               .challenge_response = std::nullopt});
  put("hello-response", Hello{.software_version = "0.1.0",
                              .challenge = std::nullopt,
                              .challenge_response = Bytes(32, 0xa7)});
  put("request-write-bw", ProbeRequest{default_spec(Operation::kWrite, TestKind::kBandwidth)});
  put("request-read-lat", ProbeRequest{default_spec(Operation::kRead, TestKind::kLatency)});
  put("request-authenticated",
      ProbeRequest{default_spec(Operation::kWrite, TestKind::kLatency), Bytes(32, 0x3c)});
  ProbeSpec duration = default_spec(Operation::kSend, TestKind::kBandwidth);
  duration.iterations.reset();
  duration.duration_seconds = 10;
  duration.qps = 4;
  duration.mtu = 4096;
  duration.gid_index = 3;
  duration.use_srq = true;
  duration.numa = NumaPolicy::kNode;
  duration.numa_node = 1;
  put("request-send-duration", ProbeRequest{duration});
  put("accept", ProbeAccept{});
  put("reject", ProbeReject{"qps=128: above this responder's limit of 64"});
  QpEndpoint qp{.qpn = 0x11,
                .psn = 0xabcdef,
                .lid = 0,
                .gid = {},
                .rkey = 0x1234,
                .addr = 0x7f00deadb000,
                .mtu = 1024};
  qp.gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};  // ::ffff:10.0.0.2
  QpEndpoint ib = qp;
  ib.qpn = 0xffffff;
  ib.lid = 0x1a;
  ib.mtu = 4096;
  put("qp-info", QpInfo{.qps = {qp, ib}, .cm = std::nullopt});
  put("ready", Ready{});
  Result result;
  result.checks = {{"port_active", true, "4: ACTIVE"}, {"rate_match", false, "100 vs 200 Gb/s"}};
  result.before = {
      {"port_xmit_data", {.value = 4000, .width_bits = 64, .scale = 4, .error_class = false}},
      {"port_xmit_wait", {.value = 7, .width_bits = 32, .scale = 1, .error_class = false}},
      {"symbol_error", {.value = 65535, .width_bits = 16, .scale = 1, .error_class = true}},
      {"hw_counters/out_of_sequence",
       {.value = 0, .width_bits = 64, .scale = 1, .error_class = false}}};
  result.after = result.before;
  result.after["port_xmit_data"].value = 4'000'000'000;
  result.after["port_xmit_wait"].value = 3;
  put("result", result);
  put("error-busy", Error{ErrorCode::kBusy, "a probe is already running"});
}

void mads(const fs::path& dir) {
  auto put = [&](const std::string& name, const mad::Mad& bytes) { write(dir / name, bytes); };
  put("get-class-port-info",
      mad::encode_get({mad::MgmtClass::kPerfMgt, mad::Attribute::kClassPortInfo, 1}));
  put("get-port-counters-ext",
      mad::encode_get({mad::MgmtClass::kPerfMgt, mad::Attribute::kPortCountersExtended, 2, 1}));
  put("get-node-info",
      mad::encode_get({mad::MgmtClass::kSubnLidRouted, mad::Attribute::kNodeInfo, 3}));

  auto response = [](mad::MgmtClass mgmt_class, mad::Attribute attribute) {
    mad::Mad bytes = mad::encode_get({mgmt_class, attribute, 0x0102030405060708, 1});
    bytes[3] = static_cast<std::uint8_t>(mad::Method::kGetResp);
    return bytes;
  };
  mad::Mad info = response(mad::MgmtClass::kPerfMgt, mad::Attribute::kClassPortInfo);
  info[mad::kDataOffset + 0] = 1;     // BaseVersion
  info[mad::kDataOffset + 1] = 1;     // ClassVersion
  info[mad::kDataOffset + 2] = 0x17;  // AllPortSelect, ExtendedWidth, XmitWait
  info[mad::kDataOffset + 3] = 0x00;
  info[mad::kDataOffset + 7] = 0x12;  // RespTimeValue
  put("resp-class-port-info", info);
  mad::Mad counters = response(mad::MgmtClass::kPerfMgt, mad::Attribute::kPortCounters);
  for (std::size_t i = 4; i < 48; ++i)
    counters[mad::kDataOffset + i] = static_cast<std::uint8_t>(i);
  put("resp-port-counters", counters);
  mad::Mad extended = response(mad::MgmtClass::kPerfMgt, mad::Attribute::kPortCountersExtended);
  for (std::size_t i = 8; i < 72; ++i) extended[mad::kDataOffset + i] = 0xff;
  put("resp-port-counters-ext-saturated", extended);
  mad::Mad node = response(mad::MgmtClass::kSubnLidRouted, mad::Attribute::kNodeInfo);
  node[mad::kDataOffset + 0] = 1;   // BaseVersion
  node[mad::kDataOffset + 1] = 1;   // ClassVersion
  node[mad::kDataOffset + 2] = 2;   // NodeType: switch
  node[mad::kDataOffset + 3] = 36;  // NumPorts
  for (std::size_t i = 12; i < 20; ++i)
    node[mad::kDataOffset + i] = static_cast<std::uint8_t>(0xe0 + i);
  put("resp-node-info-switch", node);
  mad::Mad busy = response(mad::MgmtClass::kPerfMgt, mad::Attribute::kPortCounters);
  busy[4] = 0x00;
  busy[5] = 0x0c;  // method/attribute combination not supported
  put("resp-status-unsupported", busy);
  // What a short umad read hands over: the header alone.
  write(dir / "truncated-header-only", std::span(busy).first(24));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " CORPUS_DIR\n";
    return 2;
  }
  const fs::path root = argv[1];
  control_frames(root / "control_protocol");
  mads(root / "pma_mad");
  return 0;
}
