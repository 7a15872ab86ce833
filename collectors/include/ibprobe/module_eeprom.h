// A transceiver module as its own memory describes it: identity, monitors, the module's alarm and
// warning thresholds and the flags it raises against them, for SFP (SFF-8472), QSFP+/QSFP28
// (SFF-8636) and CMIS modules (QSFP-DD, OSFP, QSFP+ and SFP+ with CMIS), decoded from the 128-byte
// pages ETHTOOL_MSG_MODULE_EEPROM_GET reads (what `ethtool -m` decodes). Pure byte work: a reader
// asks module_pages_to_read which pages to fetch, fetches them and hands them to decode_module.
//
// SFF-8636 and CMIS flags are latched: the module clears them when they are read, so whoever reads
// them first (this decoder's reader, `ethtool -m`, a switch daemon) is the one that sees them.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <expected>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ibprobe::collectors {

// Seven-bit I2C addresses, as the kernel takes them. Every family keeps its identity at 0x50
// (SFF-8472 calls it A0h); an SFP keeps its diagnostics at 0x51 (A2h).
inline constexpr std::uint8_t kModuleAddress = 0x50;
inline constexpr std::uint8_t kSfpDiagnosticsAddress = 0x51;
inline constexpr std::size_t kModulePageSize = 128;

// One read: 128 bytes at `offset` 0 (the lower half of the address space, page 0 only) or 128
// (the upper half, where page `page` of bank `bank` is mapped), from the device at `i2c_address`.
struct ModulePage {
  std::uint8_t i2c_address = kModuleAddress;
  std::uint8_t page = 0;
  std::uint8_t bank = 0;
  std::uint8_t offset = 0;

  auto operator<=>(const ModulePage&) const = default;
};

// Bytes 0-127 at 0x50: the identifier, and for SFF-8636 and CMIS the monitors and flags.
inline constexpr ModulePage kLowerPage{};

// What each read returned.
using ModulePages = std::map<ModulePage, std::vector<std::uint8_t>>;

enum class ModuleErrorKind {
  kUnknownIdentifier,  // an SFF-8024 identifier none of the three memory maps covers
  kTruncatedPage,      // a page shorter than 128 bytes, or one the memory map needs not read
  kChecksumMismatch,   // a check code that is not the sum of the bytes it covers
  kNoDiagnostics,      // the module implements no monitor (passive cables, SFPs without DDM)
};
std::string_view to_string(ModuleErrorKind kind);

struct ModuleError {
  ModuleErrorKind kind;
  std::string message;  // names the page, the byte and the values found
};

enum class ModuleFamily { kSff8472, kSff8636, kCmis };
std::string_view to_string(ModuleFamily family);

struct ModuleIdentity {
  ModuleFamily family;
  std::uint8_t identifier;  // SFF-8024 Table 4-1: 0x03 SFP, 0x11 QSFP28, 0x18 QSFP-DD, ...
  // ASCII without the padding; a byte outside printable ASCII shows as '_', as ethtool shows it,
  // so that every field is valid UTF-8 for a label value.
  std::string vendor;
  std::array<std::uint8_t, 3> vendor_oui;
  std::string part_number;
  std::string revision;
  std::string serial_number;

  bool operator==(const ModuleIdentity&) const = default;
};

// The four conditions a module flags against its thresholds for one monitored quantity.
struct ThresholdFlags {
  bool high_alarm = false;
  bool low_alarm = false;
  bool high_warning = false;
  bool low_warning = false;

  bool operator==(const ThresholdFlags&) const = default;
};

// A module's own limits for one quantity, in the quantity's base unit.
struct Thresholds {
  double high_alarm = 0;
  double low_alarm = 0;
  double high_warning = 0;
  double low_warning = 0;
};

// Lane thresholds are one set for all lanes in every family.
struct ModuleThresholds {
  Thresholds temperature_celsius;
  Thresholds supply_volts;
  Thresholds tx_bias_amperes;
  Thresholds tx_power_watts;
  Thresholds rx_power_watts;
};

struct LaneFlags {
  ThresholdFlags tx_bias;
  ThresholdFlags tx_power;
  ThresholdFlags rx_power;
  bool tx_fault = false;
  bool tx_loss_of_signal = false;  // SFF-8636 and CMIS only: an SFP has no such flag
  bool rx_loss_of_signal = false;
};

struct ModuleFlags {
  ThresholdFlags temperature;
  ThresholdFlags supply;
  std::vector<LaneFlags> lanes;  // one per ModuleReading::lanes entry, in the same order
};

// A monitor the module does not implement is absent, never zero: a zero receive power is a dark
// fibre.
struct LaneReading {
  std::optional<double> tx_bias_amperes;
  std::optional<double> tx_power_watts;
  std::optional<double> rx_power_watts;
};

// What the receive power monitor measures: optical modulation amplitude or average power.
enum class RxPowerMeasurement { kOma, kAverage };

struct ModuleReading {
  ModuleIdentity identity;
  std::optional<double> temperature_celsius;
  std::optional<double> supply_volts;
  RxPowerMeasurement rx_power_measurement = RxPowerMeasurement::kAverage;
  // 1 for SFF-8472, 4 for SFF-8636, 8 per supported bank of page 11h for CMIS (the registers
  // exist for all 8 whatever the module's application uses).
  std::vector<LaneReading> lanes;
  // Absent when the module keeps none: SFF-8472 without alarm/warning flags implemented (A0h
  // byte 93 bit 7), SFF-8636 with flat memory (no page 03h).
  std::optional<ModuleThresholds> thresholds;
  // Absent when an SFF-8472 module implements no alarm/warning flags.
  std::optional<ModuleFlags> flags;
};

// Every read the decoder uses, as far as `read_so_far` tells: the lower page first, then the
// pages the identifier's memory map needs (CMIS page 01h names the banks of page 11h, so those
// appear once it is read). A reader asks for the ones it has not asked for yet and calls again,
// until no new page appears; a page it could not read stays out of the map. An unknown
// identifier or a short lower page is an error.
std::expected<std::vector<ModulePage>, ModuleError> module_pages_to_read(
    const ModulePages& read_so_far);

// The identity alone, from the pages that hold it (their check codes verified): what an info
// series needs, also for a module without diagnostics.
std::expected<ModuleIdentity, ModuleError> decode_module_identity(const ModulePages& pages);

// Everything, after verifying every check code of the pages read.
std::expected<ModuleReading, ModuleError> decode_module(const ModulePages& pages);

}  // namespace ibprobe::collectors
