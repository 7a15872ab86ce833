// The module memory decoders against two kinds of images: real dumps that `ethtool -m ... hex on`
// printed, checked against what `ethtool -m` printed for the same module (tests/fixtures/
// module_eeprom/, each file citing its source), and images written here from the specifications'
// field tables (SFF-8472 Rev 12.x, SFF-8636 Rev 2.10a, CMIS 5.0) for what no public dump shows:
// external calibration, CMIS monitors, and every way a page can be wrong; a real CMIS module's
// identity from a dump SONiC's sfputil printed.
#include "ibprobe/module_eeprom.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "module_dumps.h"

namespace ibprobe::testing {
namespace {

using collectors::ModuleErrorKind;
using collectors::ModuleFamily;
using collectors::ModulePage;
using collectors::ModulePages;
using collectors::ModuleReading;
using collectors::RxPowerMeasurement;
using collectors::ThresholdFlags;
using collectors::Thresholds;

constexpr ModulePage kPage01{.page = 0x01, .offset = 128};
constexpr ModulePage kPage02{.page = 0x02, .offset = 128};
constexpr ModulePage lane_status(std::uint8_t bank) {
  return {.page = 0x11, .bank = bank, .offset = 128};
}

// ethtool prints milliamperes with 3 decimals, milliwatts and volts with 4, degrees with 2: a
// printed value is the decoded one within half its last digit.
constexpr double kPrintedMilliamps = 0.0005e-3;
constexpr double kPrintedMilliwatts = 0.00005e-3;
constexpr double kPrintedVolts = 0.00005;
constexpr double kPrintedDegrees = 0.005;

// Spec-derived images: pages of zeros with fields written into them at the specifications'
// offsets (upper pages from 128), and check codes summed the way the specifications define them.
class ModuleImage {
 public:
  Bytes& page(const ModulePage& where) {
    auto& bytes = pages_[where];
    bytes.resize(128);
    return bytes;
  }
  void put(const ModulePage& where, std::size_t offset, std::initializer_list<std::uint8_t> bytes) {
    std::size_t at = offset - where.offset;
    for (auto byte : bytes) page(where)[at++] = byte;
  }
  void put_u16(const ModulePage& where, std::size_t offset, std::uint16_t value) {
    put(where, offset, {static_cast<std::uint8_t>(value >> 8), static_cast<std::uint8_t>(value)});
  }
  void put_text(const ModulePage& where, std::size_t offset, std::string_view text,
                std::size_t width) {
    for (std::size_t i = 0; i < width; ++i) {
      put(where, offset + i, {static_cast<std::uint8_t>(i < text.size() ? text[i] : ' ')});
    }
  }
  // The low 8 bits of the sum of bytes first..last, stored at code_at.
  void seal(const ModulePage& where, std::size_t first, std::size_t last, std::size_t code_at) {
    unsigned sum = 0;
    for (std::size_t offset = first; offset <= last; ++offset)
      sum += page(where)[offset - where.offset];
    put(where, code_at, {static_cast<std::uint8_t>(sum)});
  }
  const std::map<ModulePage, Bytes>& memory() const { return pages_; }
  ModulePages read() const { return read_module(pages_); }

 private:
  std::map<ModulePage, Bytes> pages_;
};

void expect_thresholds(const Thresholds& actual, const Thresholds& expected, double tolerance,
                       const std::string& what) {
  EXPECT_NEAR(actual.high_alarm, expected.high_alarm, tolerance) << what << " high alarm";
  EXPECT_NEAR(actual.low_alarm, expected.low_alarm, tolerance) << what << " low alarm";
  EXPECT_NEAR(actual.high_warning, expected.high_warning, tolerance) << what << " high warning";
  EXPECT_NEAR(actual.low_warning, expected.low_warning, tolerance) << what << " low warning";
}

ModuleErrorKind error_kind(const ModulePages& pages) {
  const auto reading = collectors::decode_module(pages);
  EXPECT_FALSE(reading) << "decoded, expected an error";
  return reading ? ModuleErrorKind{} : reading.error().kind;
}

// ---- SFF-8472 --------------------------------------------------------------------------------

TEST(ModuleEepromSff8472, RealFsSfp28AsEthtoolPrintedIt) {
  std::set<ModulePage> asked;
  const auto pages =
      read_module(sfp_memory(read_hex_dump("sff8472_fs_sfp28_25gsr_85.txt")), &asked);
  EXPECT_EQ(asked, (std::set{kLower, kA2}));
  const auto reading = collectors::decode_module(pages);
  ASSERT_TRUE(reading) << reading.error().message;

  EXPECT_EQ(reading->identity.family, ModuleFamily::kSff8472);
  EXPECT_EQ(reading->identity.identifier, 0x03);
  EXPECT_EQ(reading->identity.vendor, "FS");
  EXPECT_EQ(reading->identity.vendor_oui, (std::array<std::uint8_t, 3>{0x00, 0x17, 0x6a}));
  EXPECT_EQ(reading->identity.part_number, "SFP28-25GSR-85");
  EXPECT_EQ(reading->identity.revision, "01");
  EXPECT_EQ(reading->identity.serial_number, "G1907043057");

  ASSERT_EQ(reading->lanes.size(), 1u);
  const auto& lane = reading->lanes[0];
  EXPECT_NEAR(*lane.tx_bias_amperes, 6.104e-3, kPrintedMilliamps);
  EXPECT_NEAR(*lane.rx_power_watts, 1.4392e-3, kPrintedMilliwatts);
  EXPECT_NEAR(*reading->supply_volts, 3.3840, kPrintedVolts);
  EXPECT_EQ(reading->rx_power_measurement, RxPowerMeasurement::kAverage);
  // Printed from an earlier read (41.52 degC, 1.5198 mW); the dump's own registers, A2h 96-97
  // = 0x2964 in 1/256 degC and 102-103 = 0x3aee in 0.1 uW:
  EXPECT_DOUBLE_EQ(*reading->temperature_celsius, 0x2964 / 256.0);
  EXPECT_NEAR(*lane.tx_power_watts, 0x3aee * 0.1e-6, 1e-12);

  ASSERT_TRUE(reading->thresholds);
  const auto& limits = *reading->thresholds;
  expect_thresholds(limits.tx_bias_amperes, {11.000e-3, 2.000e-3, 10.000e-3, 3.000e-3},
                    kPrintedMilliamps, "bias");
  expect_thresholds(limits.tx_power_watts, {2.2387e-3, 0.1258e-3, 2.0000e-3, 0.1737e-3},
                    kPrintedMilliwatts, "tx power");
  expect_thresholds(limits.temperature_celsius, {80.00, -10.00, 70.00, 0.00}, kPrintedDegrees,
                    "temperature");
  expect_thresholds(limits.supply_volts, {3.6000, 3.0000, 3.5000, 3.1000}, kPrintedVolts, "supply");
  expect_thresholds(limits.rx_power_watts, {2.2387e-3, 0.0630e-3, 2.0000e-3, 0.0870e-3},
                    kPrintedMilliwatts, "rx power");

  ASSERT_TRUE(reading->flags);
  const ThresholdFlags off;
  EXPECT_EQ(reading->flags->temperature, off);
  EXPECT_EQ(reading->flags->supply, off);
  ASSERT_EQ(reading->flags->lanes.size(), 1u);
  EXPECT_EQ(reading->flags->lanes[0].tx_bias, off);
  EXPECT_EQ(reading->flags->lanes[0].tx_power, off);
  EXPECT_EQ(reading->flags->lanes[0].rx_power, off);
}

// ethtool printed the identity and no diagnostics: A0h byte 92 is 0x00, so A2h is not even asked.
TEST(ModuleEepromSff8472, RealMikrotikCableWithoutDiagnostics) {
  std::set<ModulePage> asked;
  const auto pages =
      read_module(sfp_memory(read_hex_dump("sff8472_mikrotik_s_ao0005.txt")), &asked);
  EXPECT_EQ(asked, std::set{kLower});

  const auto identity = collectors::decode_module_identity(pages);
  ASSERT_TRUE(identity) << identity.error().message;
  EXPECT_EQ(identity->vendor, "MikroTik");
  EXPECT_EQ(identity->vendor_oui, (std::array<std::uint8_t, 3>{0, 0, 0}));
  EXPECT_EQ(identity->part_number, "S+AO0005");
  EXPECT_EQ(identity->revision, "1.0");
  EXPECT_EQ(identity->serial_number, "STST050B1900001");

  const auto reading = collectors::decode_module(pages);
  ASSERT_FALSE(reading);
  EXPECT_EQ(reading.error().kind, ModuleErrorKind::kNoDiagnostics);
  EXPECT_NE(reading.error().message.find("byte 92 bit 6"), std::string::npos)
      << reading.error().message;
}

// An SFP with DDM and alarm flags, its A0h and A2h check codes valid.
ModuleImage sfp_image(std::uint8_t diagnostic_type) {
  ModuleImage image;
  image.put(kLower, 0, {0x03, 0x04, 0x07});
  image.put_text(kLower, 20, "ACME", 16);
  image.put_text(kLower, 40, "SFP-TEST", 16);
  image.put_text(kLower, 68, "SN1", 16);
  image.put(kLower, 92, {diagnostic_type, 0x80});  // byte 93 bit 7: alarm/warning flags
  image.seal(kLower, 0, 62, 63);
  image.seal(kLower, 64, 94, 95);
  image.seal(kA2, 0, 94, 95);
  return image;
}

// SFF-8472 section 9.3: raw counts and the calibration constants at A2h 56-91. Each expected
// value below is the section's formula worked by hand.
TEST(ModuleEepromSff8472, ExternalCalibrationFollowsSection93) {
  auto image = sfp_image(0x40 | 0x10 | 0x08);  // DDM, externally calibrated, average power
  // Rx_PWR(4..0), IEEE 754 big-endian: 0, 0, 0.001 (0x3a83126f), 0.5 (0x3f000000), 10 (0x41200000).
  image.put(kA2, 64, {0x3a, 0x83, 0x12, 0x6f});
  image.put(kA2, 68, {0x3f, 0x00, 0x00, 0x00});
  image.put(kA2, 72, {0x41, 0x20, 0x00, 0x00});
  image.put(kA2, 76, {0x00, 0x80, 0x00, 0x00});  // Tx_I slope 0.5, offset 0
  image.put(kA2, 80, {0x01, 0x00, 0xfc, 0x18});  // Tx_PWR slope 1, offset -1000
  image.put(kA2, 84, {0x02, 0x80, 0xff, 0x00});  // T slope 2.5, offset -256
  image.put(kA2, 88, {0x01, 0x00, 0x00, 0x64});  // V slope 1, offset 100
  image.put_u16(kA2, 96, 0x0a00);                // T: 2.5 * 2560 - 256 = 6144 / 256 = 24 degC
  image.put_u16(kA2, 98, 33000);                 // V: 33000 + 100 = 33100 * 100 uV = 3.31 V
  image.put_u16(kA2, 100, 4000);                 // I: 0.5 * 4000 = 2000 * 2 uA = 4 mA
  image.put_u16(kA2, 102, 6000);                 // P: 6000 - 1000 = 5000 * 0.1 uW = 0.5 mW
  image.put_u16(kA2, 104, 1000);  // Rx: 10 + 0.5 * 1000 + 0.001 * 1000^2 = 1510 * 0.1 uW
  image.put_u16(kA2, 0, 0x3000);  // T high alarm: 2.5 * 12288 - 256 = 30464 / 256 = 119 degC
  image.seal(kA2, 0, 94, 95);

  const auto reading = collectors::decode_module(image.read());
  ASSERT_TRUE(reading) << reading.error().message;
  EXPECT_DOUBLE_EQ(*reading->temperature_celsius, 24.0);
  EXPECT_NEAR(*reading->supply_volts, 3.31, 1e-12);
  EXPECT_NEAR(*reading->lanes[0].tx_bias_amperes, 4e-3, 1e-12);
  EXPECT_NEAR(*reading->lanes[0].tx_power_watts, 0.5e-3, 1e-12);
  // The float 0.001 is 0.001000000047497451...: 1e-6 of a 0.1 uW count, well inside 1e-9 W.
  EXPECT_NEAR(*reading->lanes[0].rx_power_watts, 151e-6, 1e-9);
  EXPECT_DOUBLE_EQ(reading->thresholds->temperature_celsius.high_alarm, 119.0);
}

TEST(ModuleEepromSff8472, FlagsAndStatusBitsByTheTable) {
  auto image = sfp_image(0x40 | 0x20);
  image.put(kA2, 110, {0x06});                // TX_FAULT and RX_LOS states
  image.put(kA2, 112, {0x80 | 0x10 | 0x02});  // temp high alarm, vcc low alarm, tx power high alarm
  image.put(kA2, 113, {0x40});                // rx power low alarm
  image.put(kA2, 116, {0x20 | 0x04});         // vcc high warning, bias low warning
  image.put(kA2, 117, {0x80});                // rx power high warning
  const auto reading = collectors::decode_module(image.read());
  ASSERT_TRUE(reading) << reading.error().message;
  EXPECT_EQ(reading->rx_power_measurement, RxPowerMeasurement::kOma);
  const auto& flags = *reading->flags;
  EXPECT_EQ(flags.temperature, (ThresholdFlags{.high_alarm = true}));
  EXPECT_EQ(flags.supply, (ThresholdFlags{.low_alarm = true, .high_warning = true}));
  const auto& lane = flags.lanes.at(0);
  EXPECT_EQ(lane.tx_bias, (ThresholdFlags{.low_warning = true}));
  EXPECT_EQ(lane.tx_power, (ThresholdFlags{.high_alarm = true}));
  EXPECT_EQ(lane.rx_power, (ThresholdFlags{.low_alarm = true, .high_warning = true}));
  EXPECT_TRUE(lane.tx_fault);
  EXPECT_TRUE(lane.rx_loss_of_signal);
  EXPECT_FALSE(lane.tx_loss_of_signal);
}

TEST(ModuleEepromSff8472, WithoutAlarmFlagsNoThresholdsAndNoFlags) {
  auto image = sfp_image(0x40 | 0x20);
  image.put(kLower, 93, {0x00});
  image.seal(kLower, 64, 94, 95);
  const auto reading = collectors::decode_module(image.read());
  ASSERT_TRUE(reading) << reading.error().message;
  EXPECT_FALSE(reading->thresholds);
  EXPECT_FALSE(reading->flags);
}

TEST(ModuleEepromSff8472, HostileImages) {
  const auto real = sfp_memory(read_hex_dump("sff8472_fs_sfp28_25gsr_85.txt"));
  {
    auto memory = real;
    memory[kLower][20] ^= 0x01;  // the vendor name, under CC_BASE
    const auto reading = collectors::decode_module(read_module(memory));
    ASSERT_FALSE(reading);
    EXPECT_EQ(reading.error().kind, ModuleErrorKind::kChecksumMismatch);
    EXPECT_NE(reading.error().message.find("CC_BASE"), std::string::npos);
  }
  {
    auto memory = real;
    memory[kLower][68] ^= 0x01;  // the serial number, under CC_EXT
    EXPECT_EQ(error_kind(read_module(memory)), ModuleErrorKind::kChecksumMismatch);
  }
  {
    auto memory = real;
    memory[kA2][0] ^= 0x01;  // a threshold, under CC_DMI
    const auto reading = collectors::decode_module(read_module(memory));
    ASSERT_FALSE(reading);
    EXPECT_NE(reading.error().message.find("CC_DMI"), std::string::npos);
  }
  {
    auto memory = real;
    memory[kA2].resize(127);
    EXPECT_EQ(error_kind(read_module(memory)), ModuleErrorKind::kTruncatedPage);
  }
  {
    auto memory = real;
    memory.erase(kA2);
    EXPECT_EQ(error_kind(read_module(memory)), ModuleErrorKind::kTruncatedPage);
  }
  {
    auto image = sfp_image(0x40 | 0x20 | 0x04);  // A2h only after an address change
    EXPECT_EQ(error_kind(image.read()), ModuleErrorKind::kNoDiagnostics);
  }
}

// ---- SFF-8636 --------------------------------------------------------------------------------

TEST(ModuleEepromSff8636, RealMellanoxQsfp28AsEthtoolPrintedIt) {
  std::set<ModulePage> asked;
  const auto pages =
      read_module(qsfp_memory(read_hex_dump("sff8636_mellanox_mma1b00_ss1.txt")), &asked);
  EXPECT_EQ(asked, (std::set{kLower, kPage00, kPage03}));
  const auto reading = collectors::decode_module(pages);
  ASSERT_TRUE(reading) << reading.error().message;

  EXPECT_EQ(reading->identity.family, ModuleFamily::kSff8636);
  EXPECT_EQ(reading->identity.identifier, 0x11);
  EXPECT_EQ(reading->identity.vendor, "Mellanox");
  EXPECT_EQ(reading->identity.vendor_oui, (std::array<std::uint8_t, 3>{0x00, 0x02, 0xc9}));
  EXPECT_EQ(reading->identity.part_number, "MMA1B00-SS1");
  EXPECT_EQ(reading->identity.revision, "A2");
  EXPECT_EQ(reading->identity.serial_number, "MT1834FT03846");

  // The thresholds ethtool printed for this cable:
  ASSERT_TRUE(reading->thresholds);
  const auto& limits = *reading->thresholds;
  expect_thresholds(limits.tx_bias_amperes, {8.500e-3, 5.492e-3, 8.000e-3, 6.000e-3},
                    kPrintedMilliamps, "bias");
  expect_thresholds(limits.tx_power_watts, {3.4673e-3, 0.0724e-3, 1.7378e-3, 0.1445e-3},
                    kPrintedMilliwatts, "tx power");
  expect_thresholds(limits.temperature_celsius, {80.00, -10.00, 70.00, 0.00}, kPrintedDegrees,
                    "temperature");
  EXPECT_NEAR(limits.supply_volts.high_alarm, 3.5000, kPrintedVolts);
  EXPECT_NEAR(limits.supply_volts.low_alarm, 3.1000, kPrintedVolts);
  // Not printed in the letter; page 03h bytes 148-151 and 176-183 by the table:
  EXPECT_NEAR(limits.supply_volts.high_warning, 0x875a * 100e-6, 1e-12);
  EXPECT_NEAR(limits.supply_volts.low_warning, 0x7a76 * 100e-6, 1e-12);
  expect_thresholds(limits.rx_power_watts,
                    {0x8771 * 0.1e-6, 0x01d3 * 0.1e-6, 0x43e2 * 0.1e-6, 0x03a5 * 0.1e-6}, 1e-12,
                    "rx power");

  // Monitors (not printed in the letter) by the table: lower page bytes 22-23 and 26-27, a dark
  // cable's zeros in 34-57; byte 220 = 0x0c: average receive power, transmit power supported.
  EXPECT_DOUBLE_EQ(*reading->temperature_celsius, 0x2779 / 256.0);
  EXPECT_NEAR(*reading->supply_volts, 0x82c5 * 100e-6, 1e-12);
  EXPECT_EQ(reading->rx_power_measurement, RxPowerMeasurement::kAverage);
  ASSERT_EQ(reading->lanes.size(), 4u);
  for (const auto& lane : reading->lanes) {
    EXPECT_EQ(lane.tx_bias_amperes, 0.0);
    EXPECT_EQ(lane.tx_power_watts, 0.0);
    EXPECT_EQ(lane.rx_power_watts, 0.0);
  }
  // Byte 3 = 0xff: every lane has lost its signal both ways; bytes 9-10 = 0x55: every lane's
  // receive power is below its low alarm and low warning; byte 4 = 0: no transmitter fault.
  ASSERT_TRUE(reading->flags);
  ASSERT_EQ(reading->flags->lanes.size(), 4u);
  for (const auto& lane : reading->flags->lanes) {
    EXPECT_TRUE(lane.rx_loss_of_signal);
    EXPECT_TRUE(lane.tx_loss_of_signal);
    EXPECT_FALSE(lane.tx_fault);
    EXPECT_EQ(lane.rx_power, (ThresholdFlags{.low_alarm = true, .low_warning = true}));
    EXPECT_EQ(lane.tx_bias, ThresholdFlags{});
    EXPECT_EQ(lane.tx_power, ThresholdFlags{});
  }
  EXPECT_EQ(reading->flags->temperature, ThresholdFlags{});
}

// A QSFP28 with paged memory, check codes valid.
ModuleImage qsfp_image() {
  ModuleImage image;
  image.put(kLower, 0, {0x11, 0x07, 0x00});
  image.put(kPage00, 128, {0x11});
  image.put_text(kPage00, 148, "ACME", 16);
  image.put_text(kPage00, 168, "QSFP-TEST", 16);
  image.put_text(kPage00, 196, "SN2", 16);
  image.put(kPage00, 220, {0x0c});
  image.seal(kPage00, 128, 190, 191);
  image.seal(kPage00, 192, 222, 223);
  image.page(kPage03);
  return image;
}

TEST(ModuleEepromSff8636, LanesAndFlagsByTheTable) {
  auto image = qsfp_image();
  for (std::size_t lane = 0; lane < 4; ++lane) {
    image.put_u16(kLower, 34 + 2 * lane, static_cast<std::uint16_t>(5000 + lane));  // rx power
    image.put_u16(kLower, 42 + 2 * lane, static_cast<std::uint16_t>(3000 + lane));  // bias
    image.put_u16(kLower, 50 + 2 * lane, static_cast<std::uint16_t>(7000 + lane));  // tx power
  }
  image.put(kLower, 3, {0x21});   // lane 2 TX LOS (bit 5), lane 1 RX LOS (bit 0)
  image.put(kLower, 4, {0x08});   // lane 4 TX fault
  image.put(kLower, 6, {0x40});   // temperature low alarm
  image.put(kLower, 7, {0x20});   // supply high warning
  image.put(kLower, 10, {0x01});  // lane 4 rx power low warning (byte 10 low nibble)
  image.put(kLower, 11, {0x80});  // lane 1 bias high alarm
  image.put(kLower, 14, {0x04});  // lane 4 tx power low alarm
  const auto reading = collectors::decode_module(image.read());
  ASSERT_TRUE(reading) << reading.error().message;
  ASSERT_EQ(reading->lanes.size(), 4u);
  EXPECT_NEAR(*reading->lanes[2].rx_power_watts, 5002 * 0.1e-6, 1e-15);
  EXPECT_NEAR(*reading->lanes[2].tx_bias_amperes, 3002 * 2e-6, 1e-15);
  EXPECT_NEAR(*reading->lanes[2].tx_power_watts, 7002 * 0.1e-6, 1e-15);
  const auto& flags = *reading->flags;
  EXPECT_EQ(flags.temperature, (ThresholdFlags{.low_alarm = true}));
  EXPECT_EQ(flags.supply, (ThresholdFlags{.high_warning = true}));
  EXPECT_TRUE(flags.lanes[0].rx_loss_of_signal);
  EXPECT_FALSE(flags.lanes[0].tx_loss_of_signal);
  EXPECT_TRUE(flags.lanes[1].tx_loss_of_signal);
  EXPECT_TRUE(flags.lanes[3].tx_fault);
  EXPECT_EQ(flags.lanes[3].rx_power, (ThresholdFlags{.low_warning = true}));
  EXPECT_EQ(flags.lanes[2].rx_power, ThresholdFlags{});
  EXPECT_EQ(flags.lanes[0].tx_bias, (ThresholdFlags{.high_alarm = true}));
  EXPECT_EQ(flags.lanes[3].tx_power, (ThresholdFlags{.low_alarm = true}));
}

TEST(ModuleEepromSff8636, TxPowerOnlyWhereByte220SaysSoAndOmaByBit3) {
  auto image = qsfp_image();
  image.put(kPage00, 220, {0x20});  // temperature monitored; OMA; no transmit power
  image.seal(kPage00, 192, 222, 223);
  const auto reading = collectors::decode_module(image.read());
  ASSERT_TRUE(reading) << reading.error().message;
  EXPECT_EQ(reading->rx_power_measurement, RxPowerMeasurement::kOma);
  for (const auto& lane : reading->lanes) {
    EXPECT_FALSE(lane.tx_power_watts);
    EXPECT_TRUE(lane.rx_power_watts);
  }
}

TEST(ModuleEepromSff8636, FlatPassiveCableHasNoDiagnostics) {
  auto image = qsfp_image();
  image.put(kLower, 2, {0x04});  // flat memory
  image.put(kPage00, 220, {0x00});
  image.seal(kPage00, 192, 222, 223);
  std::set<ModulePage> asked;
  const auto pages = read_module(image.memory(), &asked);
  EXPECT_EQ(asked, (std::set{kLower, kPage00}));  // no page 03h asked
  EXPECT_EQ(error_kind(pages), ModuleErrorKind::kNoDiagnostics);
  EXPECT_TRUE(collectors::decode_module_identity(pages));
}

// Page 03h is optional: a driver that cannot read it (mlx4) costs the thresholds, not the module.
TEST(ModuleEepromSff8636, UnreadablePage03hCostsTheThresholdsOnly) {
  auto memory = qsfp_memory(read_hex_dump("sff8636_mellanox_mma1b00_ss1.txt"));
  memory.erase(kPage03);
  const auto reading = collectors::decode_module(read_module(memory));
  ASSERT_TRUE(reading) << reading.error().message;
  EXPECT_FALSE(reading->thresholds);
  EXPECT_TRUE(reading->flags);
}

TEST(ModuleEepromSff8636, HostileImages) {
  const auto real = qsfp_memory(read_hex_dump("sff8636_mellanox_mma1b00_ss1.txt"));
  {
    auto memory = real;
    memory[kPage00][148 - 128] ^= 0x20;  // the vendor name, under CC_BASE
    const auto reading = collectors::decode_module(read_module(memory));
    ASSERT_FALSE(reading);
    EXPECT_EQ(reading.error().kind, ModuleErrorKind::kChecksumMismatch);
    EXPECT_NE(reading.error().message.find("CC_BASE (byte 191)"), std::string::npos)
        << reading.error().message;
    EXPECT_EQ(collectors::decode_module_identity(read_module(memory)).error().kind,
              ModuleErrorKind::kChecksumMismatch);
  }
  {
    auto memory = real;
    memory[kPage00][196 - 128] ^= 0x01;  // the serial number, under CC_EXT
    const auto reading = collectors::decode_module(read_module(memory));
    ASSERT_FALSE(reading);
    EXPECT_NE(reading.error().message.find("CC_EXT (byte 223)"), std::string::npos)
        << reading.error().message;
  }
  {
    auto memory = real;
    memory[kPage03].resize(100);
    EXPECT_EQ(error_kind(read_module(memory)), ModuleErrorKind::kTruncatedPage);
  }
  {
    auto memory = real;
    memory.erase(kPage00);
    EXPECT_EQ(error_kind(read_module(memory)), ModuleErrorKind::kTruncatedPage);
  }
  {
    auto memory = real;
    memory[kLower][0] = 0x0e;  // CXP: SFF-8024 knows it, none of the three memory maps covers it
    const auto pages = read_module(memory);
    EXPECT_EQ(error_kind(pages), ModuleErrorKind::kUnknownIdentifier);
    EXPECT_EQ(collectors::module_pages_to_read(pages).error().kind,
              ModuleErrorKind::kUnknownIdentifier);
  }
  {
    ModulePages short_lower{{kLower, Bytes(64, 0x11)}};
    EXPECT_EQ(collectors::module_pages_to_read(short_lower).error().kind,
              ModuleErrorKind::kTruncatedPage);
  }
}

// ---- CMIS ------------------------------------------------------------------------------------

// A real CMIS module as SONiC's sfputil dumped it, with the identity its source decoded (the
// fixture cites it). The dump lacks page 01h, so it checks the identity only: no public CMIS dump
// with pages 01h and 02h and what ethtool printed for it was found.
TEST(ModuleEepromCmis, RealHisenseQsfpWithCmisIdentityAsItsSourceDecodedIt) {
  const auto dump = read_hex_dump("cmis_hisense_def8504_2c02_mb3.txt");
  ASSERT_EQ(dump.size(), 384u);
  const ModuleMemory memory{
      {kLower, slice(dump, 0)}, {kPage00, slice(dump, 128)}, {lane_status(0), slice(dump, 256)}};
  std::set<ModulePage> asked;
  const auto pages = read_module(memory, &asked);
  // Paged memory (lower page byte 2 bit 7 clear): pages 00h, 01h, 02h; 11h only once page 01h
  // says which banks there are.
  EXPECT_EQ(asked, (std::set<ModulePage>{kLower, kPage00, kPage01, kPage02}));
  const auto identity = collectors::decode_module_identity(pages);
  ASSERT_TRUE(identity) << identity.error().message;
  EXPECT_EQ(identity->family, ModuleFamily::kCmis);
  EXPECT_EQ(identity->identifier, 0x1e);  // QSFP+ or later with CMIS
  EXPECT_EQ(identity->vendor, "Hisense");
  EXPECT_EQ(identity->vendor_oui, (std::array<std::uint8_t, 3>{0xac, 0x4a, 0xfe}));
  EXPECT_EQ(identity->part_number, "DEF8504-2C02-MB3");
  EXPECT_EQ(identity->revision, "02");
  EXPECT_EQ(identity->serial_number, "VEMDBT0200A-A");
  EXPECT_EQ(error_kind(pages), ModuleErrorKind::kTruncatedPage);  // no page 01h to read
}

// This QSFP-DD is written from the CMIS 5.0 tables (lower page, pages 00h, 01h, 02h, 11h banks 0
// and 1): monitors, thresholds and flags no public CMIS dump with its decoded values shows.
ModuleImage cmis_image() {
  ModuleImage image;
  image.put(kLower, 0, {0x18, 0x50, 0x00});  // QSFP-DD, CMIS 5.0, paged memory
  image.put_u16(kLower, 14, 0x1a80);         // 26.5 degC
  image.put_u16(kLower, 16, 32768);          // 3.2768 V
  image.put(kLower, 9, {0x04 | 0x20});       // temperature high warning, supply low alarm
  image.put(kPage00, 128, {0x18});
  image.put_text(kPage00, 129, "ACME OPTICS", 16);
  image.put(kPage00, 145, {0x00, 0x11, 0x22});
  image.put_text(kPage00, 148, "QDD-400G-DR4", 16);
  image.put_text(kPage00, 164, "B1", 2);
  image.put_text(kPage00, 166, "SN0001", 16);
  image.seal(kPage00, 128, 221, 222);
  image.put(kPage01, 142, {0x01});         // banks 0 and 1 of page 11h
  image.put(kPage01, 151, {0x10});         // average receive power
  image.put(kPage01, 159, {0x03});         // temperature and supply monitors
  image.put(kPage01, 160, {0x08 | 0x07});  // bias x2; bias, tx power, rx power monitors
  image.put_u16(kPage02, 128, 0x4b00);     // temperature: 75, -5, 70, 0 degC
  image.put_u16(kPage02, 130, 0xfb00);
  image.put_u16(kPage02, 132, 0x4600);
  image.put_u16(kPage02, 136, 36300);  // supply: 3.63, 2.97, 3.465, 3.135 V
  image.put_u16(kPage02, 138, 29700);
  image.put_u16(kPage02, 140, 34650);
  image.put_u16(kPage02, 142, 31350);
  image.put_u16(kPage02, 176, 35481);  // tx power high alarm 3.5481 mW
  image.put_u16(kPage02, 184, 32000);  // bias high alarm: 32000 * 2 uA * 2 = 128 mA
  image.put_u16(kPage02, 186, 2500);   // bias low alarm: 10 mA
  image.put_u16(kPage02, 194, 1288);   // rx power low alarm 0.1288 mW
  for (std::uint8_t bank = 0; bank < 2; ++bank) {
    for (std::size_t lane = 0; lane < 8; ++lane) {
      const auto value = [&](unsigned base) {
        return static_cast<std::uint16_t>(base + 100 * bank + lane);
      };
      image.put_u16(lane_status(bank), 154 + 2 * lane, value(10000));  // tx power
      image.put_u16(lane_status(bank), 170 + 2 * lane, value(20000));  // bias
      image.put_u16(lane_status(bank), 186 + 2 * lane, value(9000));   // rx power
    }
  }
  image.put(lane_status(0), 135, {0x80});  // lane 8 tx fault
  image.put(lane_status(0), 141, {0x01});  // lane 1 tx power high warning
  image.put(lane_status(0), 147, {0x04});  // lane 3 rx LOS
  image.put(lane_status(1), 150, {0x01});  // lane 9 rx power low alarm
  image.put(lane_status(1), 136, {0x02});  // lane 10 tx LOS
  image.put(lane_status(1), 146, {0x80});  // lane 16 bias low warning
  return image;
}

TEST(ModuleEepromCmis, AsksForThePagesTheMemoryMapNames) {
  const auto image = cmis_image();
  ModulePages pages;
  EXPECT_EQ(*collectors::module_pages_to_read(pages), std::vector{kLower});
  pages[kLower] = image.memory().at(kLower);
  EXPECT_EQ(*collectors::module_pages_to_read(pages),
            (std::vector{kLower, kPage00, kPage01, kPage02}));
  pages[kPage01] = image.memory().at(kPage01);
  EXPECT_EQ(*collectors::module_pages_to_read(pages),
            (std::vector{kLower, kPage00, kPage01, kPage02, lane_status(0), lane_status(1)}));
}

TEST(ModuleEepromCmis, MonitorsThresholdsAndFlagsByTheTables) {
  const auto reading = collectors::decode_module(cmis_image().read());
  ASSERT_TRUE(reading) << reading.error().message;
  EXPECT_EQ(reading->identity.family, ModuleFamily::kCmis);
  EXPECT_EQ(reading->identity.identifier, 0x18);
  EXPECT_EQ(reading->identity.vendor, "ACME OPTICS");
  EXPECT_EQ(reading->identity.vendor_oui, (std::array<std::uint8_t, 3>{0x00, 0x11, 0x22}));
  EXPECT_EQ(reading->identity.part_number, "QDD-400G-DR4");
  EXPECT_EQ(reading->identity.revision, "B1");
  EXPECT_EQ(reading->identity.serial_number, "SN0001");
  EXPECT_DOUBLE_EQ(*reading->temperature_celsius, 26.5);
  EXPECT_NEAR(*reading->supply_volts, 3.2768, 1e-12);
  EXPECT_EQ(reading->rx_power_measurement, RxPowerMeasurement::kAverage);

  ASSERT_EQ(reading->lanes.size(), 16u);
  // Lane 11 (bank 1, lane 3): counts 10102, 20102, 9102; bias counts 2 uA times 2.
  EXPECT_NEAR(*reading->lanes[10].tx_power_watts, 10102 * 0.1e-6, 1e-15);
  EXPECT_NEAR(*reading->lanes[10].tx_bias_amperes, 20102 * 4e-6, 1e-15);
  EXPECT_NEAR(*reading->lanes[10].rx_power_watts, 9102 * 0.1e-6, 1e-15);
  EXPECT_NEAR(*reading->lanes[0].tx_bias_amperes, 20000 * 4e-6, 1e-15);

  const auto& limits = *reading->thresholds;
  expect_thresholds(limits.temperature_celsius, {75, -5, 70, 0}, 1e-12, "temperature");
  expect_thresholds(limits.supply_volts, {3.63, 2.97, 3.465, 3.135}, 1e-12, "supply");
  EXPECT_NEAR(limits.tx_power_watts.high_alarm, 3.5481e-3, 1e-12);
  EXPECT_NEAR(limits.tx_bias_amperes.high_alarm, 0.128, 1e-12);
  EXPECT_NEAR(limits.tx_bias_amperes.low_alarm, 0.010, 1e-12);
  EXPECT_NEAR(limits.rx_power_watts.low_alarm, 0.1288e-3, 1e-12);

  const auto& flags = *reading->flags;
  EXPECT_EQ(flags.temperature, (ThresholdFlags{.high_warning = true}));
  EXPECT_EQ(flags.supply, (ThresholdFlags{.low_alarm = true}));
  ASSERT_EQ(flags.lanes.size(), 16u);
  EXPECT_TRUE(flags.lanes[7].tx_fault);
  EXPECT_EQ(flags.lanes[0].tx_power, (ThresholdFlags{.high_warning = true}));
  EXPECT_TRUE(flags.lanes[2].rx_loss_of_signal);
  EXPECT_EQ(flags.lanes[8].rx_power, (ThresholdFlags{.low_alarm = true}));
  EXPECT_TRUE(flags.lanes[9].tx_loss_of_signal);
  EXPECT_EQ(flags.lanes[15].tx_bias, (ThresholdFlags{.low_warning = true}));
  int raised = 0;
  for (const auto& lane : flags.lanes) {
    raised += lane.tx_fault + lane.tx_loss_of_signal + lane.rx_loss_of_signal +
              (lane.tx_power != ThresholdFlags{}) + (lane.tx_bias != ThresholdFlags{}) +
              (lane.rx_power != ThresholdFlags{});
  }
  EXPECT_EQ(raised, 6);
}

TEST(ModuleEepromCmis, UnadvertisedMonitorsAreAbsent) {
  auto image = cmis_image();
  image.put(kPage01, 159, {0x01});  // temperature only
  image.put(kPage01, 160, {0x04});  // rx power only
  const auto reading = collectors::decode_module(image.read());
  ASSERT_TRUE(reading) << reading.error().message;
  EXPECT_TRUE(reading->temperature_celsius);
  EXPECT_FALSE(reading->supply_volts);
  for (const auto& lane : reading->lanes) {
    EXPECT_FALSE(lane.tx_bias_amperes);
    EXPECT_FALSE(lane.tx_power_watts);
    EXPECT_TRUE(lane.rx_power_watts);
  }
}

TEST(ModuleEepromCmis, HostileImages) {
  {
    auto image = cmis_image();
    image.put(kLower, 2, {0x80});  // flat memory: a passive copper cable
    std::set<ModulePage> asked;
    const auto pages = read_module(image.memory(), &asked);
    EXPECT_EQ(asked, (std::set{kLower, kPage00}));
    EXPECT_EQ(error_kind(pages), ModuleErrorKind::kNoDiagnostics);
    const auto identity = collectors::decode_module_identity(pages);
    ASSERT_TRUE(identity) << identity.error().message;
    EXPECT_EQ(identity->part_number, "QDD-400G-DR4");
  }
  {
    auto image = cmis_image();
    image.put(kPage01, 159, {0x00});
    image.put(kPage01, 160, {0x00});
    EXPECT_EQ(error_kind(image.read()), ModuleErrorKind::kNoDiagnostics);
  }
  {
    auto image = cmis_image();
    image.put(kPage00, 200, {0x01});  // the power class, under the check code
    const auto reading = collectors::decode_module(image.read());
    ASSERT_FALSE(reading);
    EXPECT_EQ(reading.error().kind, ModuleErrorKind::kChecksumMismatch);
    EXPECT_NE(reading.error().message.find("byte 222"), std::string::npos)
        << reading.error().message;
  }
  {
    auto memory = cmis_image().memory();
    memory.erase(lane_status(1));
    const auto reading = collectors::decode_module(read_module(memory));
    ASSERT_FALSE(reading);
    EXPECT_EQ(reading.error().kind, ModuleErrorKind::kTruncatedPage);
    EXPECT_NE(reading.error().message.find("page 11h bank 1"), std::string::npos)
        << reading.error().message;
  }
  {
    auto memory = cmis_image().memory();
    memory[kPage01].resize(127);
    EXPECT_EQ(error_kind(read_module(memory)), ModuleErrorKind::kTruncatedPage);
  }
  {
    auto memory = cmis_image().memory();
    memory.erase(kPage02);  // thresholds are optional
    const auto reading = collectors::decode_module(read_module(memory));
    ASSERT_TRUE(reading) << reading.error().message;
    EXPECT_FALSE(reading->thresholds);
  }
  {
    auto memory = cmis_image().memory();
    memory[kLower][0] = 0x7f;
    EXPECT_EQ(error_kind(read_module(memory)), ModuleErrorKind::kUnknownIdentifier);
  }
}

TEST(ModuleEeprom, IdentityStringsArePrintableAndTrimmed) {
  auto image = qsfp_image();
  image.put(kPage00, 148, {' ', 'A', 0x01, 'B', 0xe9, 0x00, 0x00});  // then spaces to 163
  image.seal(kPage00, 128, 190, 191);
  const auto identity = collectors::decode_module_identity(image.read());
  ASSERT_TRUE(identity) << identity.error().message;
  EXPECT_EQ(identity->vendor, "A_B_");
}

TEST(ModuleEeprom, ErrorKindsHaveReasonNames) {
  EXPECT_EQ(collectors::to_string(ModuleErrorKind::kChecksumMismatch), "checksum_mismatch");
  EXPECT_EQ(collectors::to_string(ModuleErrorKind::kNoDiagnostics), "no_diagnostics");
  EXPECT_EQ(collectors::to_string(ModuleFamily::kCmis), "cmis");
}

}  // namespace
}  // namespace ibprobe::testing
