// Writes the committed seed corpora of the binary formats: control frames made by the protocol's
// own encoder (one per message type, with the fields a real run fills in), MADs as a PMA or SMA
// answers them, transceiver module memory as a reader fetches it (the real dumps of
// tests/fixtures/module_eeprom and a CMIS module), and FEC replies as the kernel lays them out.
// Usage: fuzz_make_seeds CORPUS_DIR (tests/fuzz/corpus, beside tests/fixtures).
#include <linux/ethtool.h>
#include <linux/ethtool_netlink.h>
#include <linux/netlink.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "hex_dump.h"
#include "ibprobe/module_eeprom.h"
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
  mad::Mad speeds = response(mad::MgmtClass::kPerfMgt, mad::Attribute::kPortExtendedSpeedsCounters);
  for (std::size_t i = 16; i < 152; ++i)
    speeds[mad::kDataOffset + i] = static_cast<std::uint8_t>(i);
  put("resp-port-extended-speeds-counters", speeds);
  mad::Mad port_info_extended =
      response(mad::MgmtClass::kSubnLidRouted, mad::Attribute::kPortInfoExtended);
  port_info_extended[mad::kDataOffset + 3] = 0x01;  // IsFECModeSupported
  port_info_extended[mad::kDataOffset + 5] = 0x02;  // FECModeActive: RS-FEC
  put("resp-port-info-extended-rs-fec", port_info_extended);
  mad::Mad busy = response(mad::MgmtClass::kPerfMgt, mad::Attribute::kPortCounters);
  busy[4] = 0x00;
  busy[5] = 0x0c;  // method/attribute combination not supported
  put("resp-status-unsupported", busy);
  // What a short umad read hands over: the header alone.
  write(dir / "truncated-header-only", std::span(busy).first(24));
}

namespace optics = ibprobe::collectors;
using PageMemory = std::map<optics::ModulePage, std::vector<std::uint8_t>>;

std::vector<std::uint8_t> page_at(const std::vector<std::uint8_t>& dump, std::size_t first) {
  return {dump.begin() + static_cast<std::ptrdiff_t>(first),
          dump.begin() + static_cast<std::ptrdiff_t>(first + optics::kModulePageSize)};
}

// The pages of `memory` in the order module_pages_to_read asks for them, as the harness cuts
// its input.
std::vector<std::uint8_t> as_read(const PageMemory& memory) {
  optics::ModulePages pages;
  std::set<optics::ModulePage> asked;
  std::vector<std::uint8_t> out;
  for (bool more = true; more;) {
    more = false;
    const auto wanted = optics::module_pages_to_read(pages);
    if (!wanted) break;
    for (const auto& page : *wanted) {
      if (!asked.insert(page).second) continue;
      more = true;
      const auto it = memory.find(page);
      if (it == memory.end()) return out;  // the harness reads nothing past a failed read
      pages[page] = it->second;
      out.insert(out.end(), it->second.begin(), it->second.end());
    }
  }
  return out;
}

// A QSFP-DD after the CMIS 5.0 tables: paged memory, two banks of page 11h, every monitor.
PageMemory cmis_module() {
  const optics::ModulePage page00{.offset = 128}, page01{.page = 1, .offset = 128},
      page02{.page = 2, .offset = 128};
  PageMemory memory;
  auto& lower = memory[optics::kLowerPage];
  lower.resize(128);
  lower[0] = 0x18;
  lower[1] = 0x50;
  lower[14] = 0x1a;  // 26.5 degC
  lower[15] = 0x80;
  lower[16] = 0x80;  // 3.2768 V
  auto& identity = memory[page00];
  identity.resize(128);
  identity[0] = 0x18;
  std::memcpy(&identity[129 - 128], "ACME OPTICS", 11);
  unsigned sum = 0;
  for (std::size_t i = 0; i <= 221 - 128; ++i) sum += identity[i];
  identity[222 - 128] = static_cast<std::uint8_t>(sum);
  auto& advertising = memory[page01];
  advertising.resize(128);
  advertising[142 - 128] = 0x01;  // banks 0 and 1
  advertising[159 - 128] = 0x03;  // temperature, supply
  advertising[160 - 128] = 0x0f;  // bias x2, bias, tx and rx power
  memory[page02].assign(128, 0x40);
  for (std::uint8_t bank = 0; bank < 2; ++bank) {
    auto& status = memory[{.page = 0x11, .bank = bank, .offset = 128}];
    status.resize(128);
    for (std::size_t i = 154 - 128; i < 202 - 128; ++i) status[i] = static_cast<std::uint8_t>(i);
    status[147 - 128] = 0x04;  // lane 3 rx LOS
  }
  return memory;
}

void module_memories(const fs::path& dir, const fs::path& fixtures) {
  const optics::ModulePage a2{.i2c_address = optics::kSfpDiagnosticsAddress};
  const optics::ModulePage page00{.offset = 128}, page03{.page = 3, .offset = 128};
  const auto fs_sfp =
      ibprobe::testing::read_hex_dump_file(fixtures / "sff8472_fs_sfp28_25gsr_85.txt");
  write(dir / "sff8472-fs-sfp28",
        as_read({{optics::kLowerPage, page_at(fs_sfp, 0)}, {a2, page_at(fs_sfp, 256)}}));
  const auto mikrotik =
      ibprobe::testing::read_hex_dump_file(fixtures / "sff8472_mikrotik_s_ao0005.txt");
  write(dir / "sff8472-mikrotik-no-diagnostics",
        as_read({{optics::kLowerPage, page_at(mikrotik, 0)}}));
  const auto mellanox =
      ibprobe::testing::read_hex_dump_file(fixtures / "sff8636_mellanox_mma1b00_ss1.txt");
  const PageMemory qsfp{{optics::kLowerPage, page_at(mellanox, 0)},
                        {page00, page_at(mellanox, 128)},
                        {page03, page_at(mellanox, 512)}};
  write(dir / "sff8636-mellanox-qsfp28", as_read(qsfp));
  const auto cmis = as_read(cmis_module());
  write(dir / "cmis-qsfp-dd-two-banks", cmis);
  write(dir / "cmis-truncated-bank-1", std::span(cmis).first(cmis.size() - 60));
}

void put_attribute(std::vector<std::uint8_t>& out, std::uint16_t type,
                   std::span<const std::uint8_t> payload) {
  const auto length = static_cast<std::uint16_t>(NLA_HDRLEN + payload.size());
  const std::size_t at = out.size();
  out.resize(at + NLA_ALIGN(length), 0);
  std::memcpy(out.data() + at, &length, sizeof length);
  std::memcpy(out.data() + at + 2, &type, sizeof type);
  if (!payload.empty()) std::memcpy(out.data() + at + NLA_HDRLEN, payload.data(), payload.size());
}

template <typename T>
std::span<const std::uint8_t> bytes_of(const std::vector<T>& values) {
  return {reinterpret_cast<const std::uint8_t*>(values.data()), values.size() * sizeof(T)};
}

void fec_replies(const fs::path& dir) {
  std::vector<std::uint8_t> header;
  put_attribute(header, ETHTOOL_A_HEADER_DEV_INDEX, bytes_of(std::vector<std::uint32_t>{2}));
  put_attribute(header, ETHTOOL_A_HEADER_DEV_NAME,
                bytes_of(std::vector<char>{'e', 't', 'h', '0', 0}));
  std::vector<std::uint8_t> stats;
  put_attribute(stats, ETHTOOL_A_FEC_STAT_PAD, {});
  put_attribute(stats, ETHTOOL_A_FEC_STAT_CORRECTED,
                bytes_of(std::vector<std::uint64_t>{1000, 400, 300, 200, 100}));
  put_attribute(stats, ETHTOOL_A_FEC_STAT_UNCORR, bytes_of(std::vector<std::uint64_t>{3}));
  put_attribute(stats, ETHTOOL_A_FEC_STAT_CORR_BITS, {});
  std::vector<std::uint8_t> reply;
  put_attribute(reply, ETHTOOL_A_FEC_HEADER | NLA_F_NESTED, header);
  put_attribute(reply, ETHTOOL_A_FEC_AUTO, bytes_of(std::vector<std::uint8_t>{0}));
  put_attribute(reply, ETHTOOL_A_FEC_ACTIVE,
                bytes_of(std::vector<std::uint32_t>{ETHTOOL_LINK_MODE_FEC_RS_BIT}));
  put_attribute(reply, ETHTOOL_A_FEC_STATS | NLA_F_NESTED, stats);
  write(dir / "rs-fec-four-lanes", reply);

  std::vector<std::uint8_t> off;
  put_attribute(off, ETHTOOL_A_FEC_HEADER | NLA_F_NESTED, header);
  put_attribute(off, ETHTOOL_A_FEC_ACTIVE,
                bytes_of(std::vector<std::uint32_t>{ETHTOOL_LINK_MODE_FEC_NONE_BIT}));
  write(dir / "fec-off-without-statistics", off);
  // The last attribute's padding cut off with the message.
  write(dir / "cut-padding", std::span(reply).first(reply.size() - 2));
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
  module_memories(root / "module_eeprom", root / "../../fixtures/module_eeprom");
  fec_replies(root / "fec_statistics");
  return 0;
}
