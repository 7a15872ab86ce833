#include "ibprobe/module_eeprom.h"

#include <bit>
#include <cstdio>
#include <span>
#include <utility>

#include "ibprobe/enum_names.h"

// Byte offsets are the specifications' own, in the 256-byte address space of one I2C address
// (upper pages from 128), so that each can be checked against its table. The meaning of each byte
// follows the specifications and ethtool's decoders of them (sfpdiag.c, qsfp.c, cmis.c), which are
// cited where the two differ.
namespace ibprobe::collectors {
namespace {

constexpr EnumNames<ModuleErrorKind, 4> kErrorNames{{
    {ModuleErrorKind::kUnknownIdentifier, "unknown_identifier"},
    {ModuleErrorKind::kTruncatedPage, "truncated_page"},
    {ModuleErrorKind::kChecksumMismatch, "checksum_mismatch"},
    {ModuleErrorKind::kNoDiagnostics, "no_diagnostics"},
}};

constexpr EnumNames<ModuleFamily, 3> kFamilyNames{{
    {ModuleFamily::kSff8472, "sff8472"},
    {ModuleFamily::kSff8636, "sff8636"},
    {ModuleFamily::kCmis, "cmis"},
}};

constexpr ModulePage kUpperPage00{.offset = 128};
constexpr ModulePage kSfpDiagnostics{.i2c_address = kSfpDiagnosticsAddress};
constexpr ModulePage kSff8636Thresholds{.page = 0x03, .offset = 128};
constexpr ModulePage kCmisAdvertising{.page = 0x01, .offset = 128};
constexpr ModulePage kCmisThresholds{.page = 0x02, .offset = 128};
constexpr std::uint8_t kCmisLaneStatusPage = 0x11;
constexpr int kCmisLanesPerBank = 8;
constexpr int kSff8636Lanes = 4;

// SFF-8024 Table 4-1, grouped by the memory map each identifier uses, as ethtool's
// netlink/module-eeprom.c dispatches them.
std::optional<ModuleFamily> family_of(std::uint8_t identifier) {
  switch (identifier) {
    case 0x01:  // GBIC
    case 0x02:  // module soldered to the board
    case 0x03:  // SFP/SFP+/SFP28
      return ModuleFamily::kSff8472;
    case 0x0C:  // QSFP
    case 0x0D:  // QSFP+
    case 0x11:  // QSFP28
      return ModuleFamily::kSff8636;
    case 0x18:  // QSFP-DD
    case 0x19:  // OSFP
    case 0x1B:  // DSFP
    case 0x1E:  // QSFP+ with CMIS
    case 0x1F:  // SFP-DD with CMIS
    case 0x20:  // SFP+ with CMIS
      return ModuleFamily::kCmis;
    default:
      return std::nullopt;
  }
}

std::string hex(unsigned value) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%02x", value);
  return text;
}

std::string describe(const ModulePage& page) {
  if (page.i2c_address == kSfpDiagnosticsAddress) return "A2h bytes 0-127";
  if (page.offset == 0) return "lower page";
  std::string name = "page " + hex(page.page).substr(2) + "h";
  if (page.bank != 0) name += " bank " + std::to_string(page.bank);
  return name;
}

std::unexpected<ModuleError> failure(ModuleErrorKind kind, std::string message) {
  return std::unexpected(ModuleError{kind, std::move(message)});
}

// One page's bytes, addressed by their offset in the address space (upper pages from 128).
// Multi-byte fields are big-endian in every family.
class PageBytes {
 public:
  PageBytes(std::span<const std::uint8_t> bytes, std::size_t first)
      : bytes_(bytes), first_(first) {}

  std::uint8_t u8(std::size_t offset) const { return bytes_[offset - first_]; }
  std::uint16_t u16(std::size_t offset) const {
    return static_cast<std::uint16_t>(u8(offset) << 8 | u8(offset + 1));
  }
  std::int16_t s16(std::size_t offset) const { return static_cast<std::int16_t>(u16(offset)); }
  bool bit(std::size_t offset, int bit) const { return (u8(offset) >> bit) & 1; }

  // The low eight bits of the sum of bytes first..last: a check code (SFF-8472 CC_BASE, CC_EXT,
  // CC_DMI; SFF-8636 CC_BASE, CC_EXT; CMIS page 00h byte 222).
  std::uint8_t sum(std::size_t first, std::size_t last) const {
    unsigned total = 0;
    for (std::size_t offset = first; offset <= last; ++offset) total += u8(offset);
    return static_cast<std::uint8_t>(total);
  }

  // `length` ASCII bytes from `first` without their padding (spaces, and the NULs some modules
  // pad with).
  std::string text(std::size_t first, std::size_t length) const {
    std::string field(length, ' ');
    for (std::size_t i = 0; i < length; ++i) field[i] = static_cast<char>(u8(first + i));
    constexpr std::string_view kPadding(" \0", 2);
    const auto begin = field.find_first_not_of(kPadding);
    if (begin == std::string::npos) return {};
    field = field.substr(begin, field.find_last_not_of(kPadding) - begin + 1);
    for (char& c : field) {
      if (c < 0x20 || c > 0x7e) c = '_';
    }
    return field;
  }

 private:
  std::span<const std::uint8_t> bytes_;
  std::size_t first_;
};

std::expected<PageBytes, ModuleError> page_of(const ModulePages& pages, const ModulePage& where) {
  const auto it = pages.find(where);
  if (it == pages.end()) {
    return failure(ModuleErrorKind::kTruncatedPage, describe(where) + " was not read");
  }
  if (it->second.size() < kModulePageSize) {
    return failure(
        ModuleErrorKind::kTruncatedPage,
        describe(where) + " has " + std::to_string(it->second.size()) + " bytes, not 128");
  }
  return PageBytes(std::span(it->second).first(kModulePageSize), where.offset);
}

// A page the memory map makes optional: absent is fine, short is not.
std::expected<std::optional<PageBytes>, ModuleError> optional_page_of(const ModulePages& pages,
                                                                      const ModulePage& where) {
  if (!pages.contains(where)) return std::nullopt;
  const auto page = page_of(pages, where);
  if (!page) return std::unexpected(page.error());
  return *page;
}

std::expected<void, ModuleError> verify_check_code(const PageBytes& page, const ModulePage& where,
                                                   std::string_view name, std::size_t first,
                                                   std::size_t last, std::size_t code_at) {
  const std::uint8_t computed = page.sum(first, last);
  if (computed == page.u8(code_at)) return {};
  return failure(ModuleErrorKind::kChecksumMismatch,
                 describe(where) + " " + std::string(name) + " (byte " + std::to_string(code_at) +
                     "): " + hex(page.u8(code_at)) + " stored, " + hex(computed) +
                     " is the sum of bytes " + std::to_string(first) + "-" + std::to_string(last));
}

// The units every family shares (SFF-8472 section 9.2, SFF-8636 page 00h bytes 22-57, CMIS 5.0
// Tables 8-9 and 8-79): temperature in 1/256 degC (signed), supply in 100 uV, bias in 2 uA,
// optical power in 0.1 uW.
double celsius(double raw) {
  return raw / 256;
}
double volts(double raw) {
  return raw * 100e-6;
}
double amperes(double raw) {
  return raw * 2e-6;
}
double watts(double raw) {
  return raw * 0.1e-6;
}

std::optional<double> if_implemented(bool implemented, double value) {
  return implemented ? std::optional(value) : std::nullopt;
}

// A quantity's four thresholds, two bytes each in the order every family stores them: high
// alarm, low alarm, high warning, low warning. `read` turns the field at an offset into the unit.
template <typename Read>
Thresholds thresholds_at(std::size_t first, Read read) {
  return {read(first), read(first + 2), read(first + 4), read(first + 6)};
}

// Four flag bits of one quantity from highest to lowest: high alarm, low alarm, high warning,
// low warning (SFF-8636 bytes 6-14).
ThresholdFlags descending_flags(std::uint8_t byte, int high_alarm_bit) {
  const auto bit = [&](int n) { return ((byte >> n) & 1) != 0; };
  return {bit(high_alarm_bit), bit(high_alarm_bit - 1), bit(high_alarm_bit - 2),
          bit(high_alarm_bit - 3)};
}

// Where a family keeps its identity: 16-byte vendor name, part number and serial number, the
// 3-byte OUI, and a revision of `revision_length` bytes.
struct IdentityFields {
  std::size_t vendor;
  std::size_t oui;
  std::size_t part_number;
  std::size_t revision;
  std::size_t revision_length;
  std::size_t serial_number;
};
constexpr IdentityFields kSff8472Identity{20, 37, 40, 56, 4, 68};       // A0h
constexpr IdentityFields kSff8636Identity{148, 165, 168, 184, 2, 196};  // page 00h
constexpr IdentityFields kCmisIdentity{129, 145, 148, 164, 2, 166};     // page 00h

ModuleIdentity identity_at(ModuleFamily family, std::uint8_t identifier, const PageBytes& page,
                           const IdentityFields& at) {
  return {.family = family,
          .identifier = identifier,
          .vendor = page.text(at.vendor, 16),
          .vendor_oui = {page.u8(at.oui), page.u8(at.oui + 1), page.u8(at.oui + 2)},
          .part_number = page.text(at.part_number, 16),
          .revision = page.text(at.revision, at.revision_length),
          .serial_number = page.text(at.serial_number, 16)};
}

// ---- SFF-8472: A0h identity, A2h diagnostics -------------------------------------------------

constexpr std::size_t kSfpDiagnosticType = 92;  // A0h
constexpr int kSfpDdmImplemented = 6;
constexpr int kSfpExternallyCalibrated = 4;
constexpr int kSfpRxPowerAverage = 3;
constexpr int kSfpAddressChange = 2;
constexpr std::size_t kSfpEnhancedOptions = 93;  // A0h
constexpr int kSfpAlarmWarningFlags = 7;

std::expected<PageBytes, ModuleError> sff8472_base(const ModulePages& pages) {
  auto a0 = page_of(pages, kLowerPage);
  if (!a0) return a0;
  if (auto ok = verify_check_code(*a0, kLowerPage, "CC_BASE", 0, 62, 63); !ok) {
    return std::unexpected(ok.error());
  }
  if (auto ok = verify_check_code(*a0, kLowerPage, "CC_EXT", 64, 94, 95); !ok) {
    return std::unexpected(ok.error());
  }
  return a0;
}

ModuleIdentity sff8472_identity(const PageBytes& a0) {
  return identity_at(ModuleFamily::kSff8472, a0.u8(0), a0, kSff8472Identity);
}

// Why the diagnostics at A2h cannot be read, if they cannot.
std::optional<std::string> sff8472_without_diagnostics(const PageBytes& a0) {
  if (!a0.bit(kSfpDiagnosticType, kSfpDdmImplemented)) {
    return "A0h byte 92 bit 6 (digital diagnostic monitoring implemented) is clear";
  }
  if (a0.bit(kSfpDiagnosticType, kSfpAddressChange)) {
    return "A0h byte 92 bit 2: A2h is reached only after an address change sequence, which a "
           "page read does not perform";
  }
  return std::nullopt;
}

// Turns the counts at A2h into the units of an internally calibrated module. An externally
// calibrated module reports raw A/D counts and the constants at A2h bytes 56-91 to convert them
// (SFF-8472 section 9.3); its thresholds are stored and converted the same way (as ethtool's
// sfpdiag.c does). An internally calibrated module's conversion is the identity.
class Sff8472Calibration {
 public:
  static Sff8472Calibration internal() { return Sff8472Calibration(); }
  static Sff8472Calibration external(const PageBytes& a2) {
    Sff8472Calibration calibration;
    calibration.rx_power_ = {big_endian_float(a2, 72), big_endian_float(a2, 68),
                             big_endian_float(a2, 64), big_endian_float(a2, 60),
                             big_endian_float(a2, 56)};
    calibration.tx_bias_ = linear_at(a2, 76);
    calibration.tx_power_ = linear_at(a2, 80);
    calibration.temperature_ = linear_at(a2, 84);
    calibration.supply_ = linear_at(a2, 88);
    return calibration;
  }

  double temperature(std::int16_t counts) const { return temperature_.apply(counts); }
  double supply(std::uint16_t counts) const { return supply_.apply(counts); }
  double tx_bias(std::uint16_t counts) const { return tx_bias_.apply(counts); }
  double tx_power(std::uint16_t counts) const { return tx_power_.apply(counts); }
  // Rx_PWR(0) + Rx_PWR(1)*c + Rx_PWR(2)*c^2 + Rx_PWR(3)*c^3 + Rx_PWR(4)*c^4, the polynomial of
  // section 9.3. (ethtool 6.15 multiplies Rx_PWR(1..3) by c alone and leaves Rx_PWR(4) out.)
  double rx_power(std::uint16_t counts) const {
    double result = 0;
    for (auto coefficient = rx_power_.rbegin(); coefficient != rx_power_.rend(); ++coefficient) {
      result = result * counts + *coefficient;
    }
    return result;
  }

 private:
  struct Linear {
    double slope = 1;
    double offset = 0;
    double apply(double counts) const { return slope * counts + offset; }
  };

  Sff8472Calibration() = default;

  // Slope: unsigned fixed point, integer part first; offset: signed 16-bit, in the result's unit.
  static Linear linear_at(const PageBytes& a2, std::size_t at) {
    return {a2.u8(at) + a2.u8(at + 1) / 256.0, static_cast<double>(a2.s16(at + 2))};
  }
  // IEEE 754 single precision, most significant byte first.
  static double big_endian_float(const PageBytes& a2, std::size_t at) {
    const std::uint32_t bits = static_cast<std::uint32_t>(a2.u16(at)) << 16 | a2.u16(at + 2);
    return std::bit_cast<float>(bits);
  }

  std::array<double, 5> rx_power_{0, 1, 0, 0, 0};  // Rx_PWR(0) to Rx_PWR(4)
  Linear tx_bias_;
  Linear tx_power_;
  Linear temperature_;
  Linear supply_;
};

std::expected<ModuleReading, ModuleError> decode_sff8472(const ModulePages& pages) {
  const auto a0 = sff8472_base(pages);
  if (!a0) return std::unexpected(a0.error());
  if (const auto reason = sff8472_without_diagnostics(*a0)) {
    return failure(ModuleErrorKind::kNoDiagnostics, *reason);
  }
  const auto a2 = page_of(pages, kSfpDiagnostics);
  if (!a2) return std::unexpected(a2.error());
  if (auto ok = verify_check_code(*a2, kSfpDiagnostics, "CC_DMI", 0, 94, 95); !ok) {
    return std::unexpected(ok.error());
  }

  const PageBytes& dm = *a2;
  const auto calibration = a0->bit(kSfpDiagnosticType, kSfpExternallyCalibrated)
                               ? Sff8472Calibration::external(dm)
                               : Sff8472Calibration::internal();
  const auto temperature_at = [&](std::size_t at) {
    return celsius(calibration.temperature(dm.s16(at)));
  };
  const auto supply_at = [&](std::size_t at) { return volts(calibration.supply(dm.u16(at))); };
  const auto tx_bias_at = [&](std::size_t at) { return amperes(calibration.tx_bias(dm.u16(at))); };
  const auto tx_power_at = [&](std::size_t at) { return watts(calibration.tx_power(dm.u16(at))); };
  const auto rx_power_at = [&](std::size_t at) { return watts(calibration.rx_power(dm.u16(at))); };

  ModuleReading reading{
      .identity = sff8472_identity(*a0),
      .temperature_celsius = temperature_at(96),
      .supply_volts = supply_at(98),
      .rx_power_measurement = a0->bit(kSfpDiagnosticType, kSfpRxPowerAverage)
                                  ? RxPowerMeasurement::kAverage
                                  : RxPowerMeasurement::kOma,
      .lanes = {{.tx_bias_amperes = tx_bias_at(100),
                 .tx_power_watts = tx_power_at(102),
                 .rx_power_watts = rx_power_at(104)}},
      .thresholds = std::nullopt,
      .flags = std::nullopt,
  };
  if (a0->bit(kSfpEnhancedOptions, kSfpAlarmWarningFlags)) {
    reading.thresholds = ModuleThresholds{
        .temperature_celsius = thresholds_at(0, temperature_at),
        .supply_volts = thresholds_at(8, supply_at),
        .tx_bias_amperes = thresholds_at(16, tx_bias_at),
        .tx_power_watts = thresholds_at(24, tx_power_at),
        .rx_power_watts = thresholds_at(32, rx_power_at),
    };
    // Alarms at bytes 112-113, warnings at 116-117, each quantity's high flag above its low one.
    const auto flags = [&](std::size_t byte, int high_bit) {
      return ThresholdFlags{dm.bit(byte, high_bit), dm.bit(byte, high_bit - 1),
                            dm.bit(byte + 4, high_bit), dm.bit(byte + 4, high_bit - 1)};
    };
    reading.flags = ModuleFlags{
        .temperature = flags(112, 7),
        .supply = flags(112, 5),
        // Byte 110: the real-time TX_FAULT (bit 2) and RX_LOS (bit 1) states.
        .lanes = {{.tx_bias = flags(112, 3),
                   .tx_power = flags(112, 1),
                   .rx_power = flags(113, 7),
                   .tx_fault = dm.bit(110, 2),
                   .tx_loss_of_signal = false,
                   .rx_loss_of_signal = dm.bit(110, 1)}},
    };
  }
  return reading;
}

// ---- SFF-8636: lower page monitors and flags, page 00h identity, page 03h thresholds ---------

constexpr std::size_t kQsfpStatus = 2;  // lower page
constexpr int kQsfpFlatMemory = 2;
constexpr std::size_t kQsfpDiagnosticType = 220;  // page 00h, SFF-8636 Rev 2.10a Table 6-23
constexpr int kQsfpTemperatureImplemented = 5;
constexpr int kQsfpSupplyImplemented = 4;
constexpr int kQsfpRxPowerAverage = 3;
constexpr int kQsfpTxPowerSupported = 2;

bool sff8636_flat(const PageBytes& lower) {
  return lower.bit(kQsfpStatus, kQsfpFlatMemory);
}

std::expected<PageBytes, ModuleError> sff8636_page00(const ModulePages& pages) {
  auto page = page_of(pages, kUpperPage00);
  if (!page) return page;
  if (auto ok = verify_check_code(*page, kUpperPage00, "CC_BASE", 128, 190, 191); !ok) {
    return std::unexpected(ok.error());
  }
  if (auto ok = verify_check_code(*page, kUpperPage00, "CC_EXT", 192, 222, 223); !ok) {
    return std::unexpected(ok.error());
  }
  return page;
}

ModuleIdentity sff8636_identity(const PageBytes& lower, const PageBytes& page00) {
  return identity_at(ModuleFamily::kSff8636, lower.u8(0), page00, kSff8636Identity);
}

std::expected<ModuleReading, ModuleError> decode_sff8636(const ModulePages& pages,
                                                         const PageBytes& lower) {
  const auto page00 = sff8636_page00(pages);
  if (!page00) return std::unexpected(page00.error());
  const bool flat = sff8636_flat(lower);
  const std::uint8_t diagnostic_type = page00->u8(kQsfpDiagnosticType);
  // Byte 220 advertises temperature and supply monitors only from Rev 2.8 on ("0b = not
  // implemented or pre-Rev 2.8"), so a clear bit alone does not mean absent; a module with flat
  // memory that advertises no monitor at all is a passive cable.
  constexpr std::uint8_t kAnyMonitor =
      1 << kQsfpTemperatureImplemented | 1 << kQsfpSupplyImplemented | 1 << kQsfpTxPowerSupported;
  if (flat && (diagnostic_type & kAnyMonitor) == 0) {
    const std::string advertised = hex(diagnostic_type);
    return failure(ModuleErrorKind::kNoDiagnostics,
                   "flat memory (lower page byte 2 bit 2) and no monitor in page 00h byte 220 (" +
                       advertised + ")");
  }
  const bool tx_power_supported = (diagnostic_type >> kQsfpTxPowerSupported) & 1;

  ModuleReading reading{
      .identity = sff8636_identity(lower, *page00),
      .temperature_celsius = celsius(lower.s16(22)),
      .supply_volts = volts(lower.u16(26)),
      .rx_power_measurement = (diagnostic_type >> kQsfpRxPowerAverage) & 1
                                  ? RxPowerMeasurement::kAverage
                                  : RxPowerMeasurement::kOma,
      .lanes = {},
      .thresholds = std::nullopt,
      .flags = std::nullopt,
  };
  ModuleFlags flags{.temperature = descending_flags(lower.u8(6), 7),
                    .supply = descending_flags(lower.u8(7), 7),
                    .lanes = {}};
  for (int lane = 0; lane < kSff8636Lanes; ++lane) {
    const std::size_t field = 2 * static_cast<std::size_t>(lane);
    reading.lanes.push_back({
        .tx_bias_amperes = amperes(lower.u16(42 + field)),
        .tx_power_watts = if_implemented(tx_power_supported, watts(lower.u16(50 + field))),
        .rx_power_watts = watts(lower.u16(34 + field)),
    });
    // Bytes 9-14 pack two lanes per byte: lanes 1 and 3 in the high nibbles.
    const std::size_t pair = static_cast<std::size_t>(lane / 2);
    const int high_alarm_bit = lane % 2 == 0 ? 7 : 3;
    flags.lanes.push_back({
        .tx_bias = descending_flags(lower.u8(11 + pair), high_alarm_bit),
        .tx_power = descending_flags(lower.u8(13 + pair), high_alarm_bit),
        .rx_power = descending_flags(lower.u8(9 + pair), high_alarm_bit),
        .tx_fault = lower.bit(4, lane),
        .tx_loss_of_signal = lower.bit(3, 4 + lane),
        .rx_loss_of_signal = lower.bit(3, lane),
    });
  }
  reading.flags = std::move(flags);

  // Page 03h is optional, and some drivers (mlx4) cannot read it although the module has it:
  // without it the module simply has no thresholds to report.
  if (!flat) {
    const auto page03 = optional_page_of(pages, kSff8636Thresholds);
    if (!page03) return std::unexpected(page03.error());
    if (*page03) {
      const PageBytes& limits = **page03;
      reading.thresholds = ModuleThresholds{
          .temperature_celsius =
              thresholds_at(128, [&](std::size_t at) { return celsius(limits.s16(at)); }),
          .supply_volts = thresholds_at(144, [&](std::size_t at) { return volts(limits.u16(at)); }),
          .tx_bias_amperes =
              thresholds_at(184, [&](std::size_t at) { return amperes(limits.u16(at)); }),
          .tx_power_watts =
              thresholds_at(192, [&](std::size_t at) { return watts(limits.u16(at)); }),
          .rx_power_watts =
              thresholds_at(176, [&](std::size_t at) { return watts(limits.u16(at)); }),
      };
    }
  }
  return reading;
}

// ---- CMIS: lower page monitors, page 00h identity, 01h advertising, 02h thresholds, 11h lanes -

constexpr std::size_t kCmisMemoryModel = 2;  // lower page
constexpr int kCmisFlatMemory = 7;
constexpr std::size_t kCmisBanksSupported = 142;   // page 01h, bits 1-0
constexpr std::size_t kCmisCharacteristics = 151;  // page 01h
constexpr int kCmisRxPowerAverage = 4;             // as ethtool's cmis.h reads it
constexpr std::size_t kCmisModuleMonitors = 159;   // page 01h
constexpr int kCmisTemperatureMonitor = 0;
constexpr int kCmisSupplyMonitor = 1;
constexpr std::size_t kCmisLaneMonitors = 160;  // page 01h
constexpr int kCmisTxBiasMonitor = 0;
constexpr int kCmisTxPowerMonitor = 1;
constexpr int kCmisRxPowerMonitor = 2;

bool cmis_flat(const PageBytes& lower) {
  return lower.bit(kCmisMemoryModel, kCmisFlatMemory);
}

// Page 11h comes in 1, 2 or 4 banks of 8 lanes (CMIS 5.0 section 8.4.4, Table 8-40); the
// reserved code reads as bank 0 alone.
int cmis_banks(const PageBytes& page01) {
  switch (page01.u8(kCmisBanksSupported) & 0x03) {
    case 1:
      return 2;
    case 2:
      return 4;
    default:
      return 1;
  }
}

// Bias monitors and thresholds count in 2 uA times 1, 2 or 4 (page 01h byte 160 bits 4-3; the
// reserved code reads as 1): 16 bits of 2 uA end at 131 mA, which some lasers exceed. So does
// sonic-platform-common's CmisApi; ethtool 6.15 divides by the factor instead (cmis_tx_bias_mul).
double cmis_bias_scale(const PageBytes& page01) {
  const int code = (page01.u8(kCmisLaneMonitors) >> 3) & 0x03;
  return code == 3 ? 1 : 1 << code;
}

ModulePage cmis_lane_status(int bank) {
  return {.page = kCmisLaneStatusPage, .bank = static_cast<std::uint8_t>(bank), .offset = 128};
}

std::expected<PageBytes, ModuleError> cmis_page00(const ModulePages& pages) {
  auto page = page_of(pages, kUpperPage00);
  if (!page) return page;
  if (auto ok = verify_check_code(*page, kUpperPage00, "check code", 128, 221, 222); !ok) {
    return std::unexpected(ok.error());
  }
  return page;
}

ModuleIdentity cmis_identity(const PageBytes& lower, const PageBytes& page00) {
  return identity_at(ModuleFamily::kCmis, lower.u8(0), page00, kCmisIdentity);
}

// Lane flags of page 11h (CMIS 5.0 section 8.9.3, Tables 8-77 and 8-78): one byte per flag, one
// bit per lane of the bank. (ethtool 6.15 tests the byte against the lane number, not its bit.)
LaneFlags cmis_lane_flags(const PageBytes& status, int lane) {
  const auto flag = [&](std::size_t byte) { return status.bit(byte, lane); };
  const auto four = [&](std::size_t first) {
    return ThresholdFlags{flag(first), flag(first + 1), flag(first + 2), flag(first + 3)};
  };
  return {.tx_bias = four(143),
          .tx_power = four(139),
          .rx_power = four(149),
          .tx_fault = flag(135),
          .tx_loss_of_signal = flag(136),
          .rx_loss_of_signal = flag(147)};
}

std::expected<ModuleReading, ModuleError> decode_cmis(const ModulePages& pages,
                                                      const PageBytes& lower) {
  const auto page00 = cmis_page00(pages);
  if (!page00) return std::unexpected(page00.error());
  if (cmis_flat(lower)) {
    return failure(ModuleErrorKind::kNoDiagnostics,
                   "flat memory (lower page byte 2 bit 7): no page 01h to advertise a monitor");
  }
  const auto page01 = page_of(pages, kCmisAdvertising);
  if (!page01) return std::unexpected(page01.error());
  const auto supported = [&](std::size_t byte, int bit) { return page01->bit(byte, bit); };
  const bool temperature = supported(kCmisModuleMonitors, kCmisTemperatureMonitor);
  const bool supply = supported(kCmisModuleMonitors, kCmisSupplyMonitor);
  const bool tx_bias = supported(kCmisLaneMonitors, kCmisTxBiasMonitor);
  const bool tx_power = supported(kCmisLaneMonitors, kCmisTxPowerMonitor);
  const bool rx_power = supported(kCmisLaneMonitors, kCmisRxPowerMonitor);
  if (!temperature && !supply && !tx_bias && !tx_power && !rx_power) {
    return failure(ModuleErrorKind::kNoDiagnostics, "page 01h advertises no monitor (byte 159 " +
                                                        hex(page01->u8(kCmisModuleMonitors)) +
                                                        ", byte 160 " +
                                                        hex(page01->u8(kCmisLaneMonitors)) + ")");
  }
  const double bias_scale = cmis_bias_scale(*page01);
  const auto bias_at = [&](const PageBytes& page, std::size_t at) {
    return amperes(page.u16(at) * bias_scale);
  };

  ModuleReading reading{
      .identity = cmis_identity(lower, *page00),
      .temperature_celsius = if_implemented(temperature, celsius(lower.s16(14))),
      .supply_volts = if_implemented(supply, volts(lower.u16(16))),
      .rx_power_measurement = supported(kCmisCharacteristics, kCmisRxPowerAverage)
                                  ? RxPowerMeasurement::kAverage
                                  : RxPowerMeasurement::kOma,
      .lanes = {},
      .thresholds = std::nullopt,
      .flags = std::nullopt,
  };
  // Lower page byte 9 (CMIS 5.0 section 8.2.4, Table 8-8): temperature in bits 0-3 and supply in
  // bits 4-7, each high alarm, low alarm, high warning, low warning from the lowest bit up.
  const auto module_flags = [&](int first_bit) {
    const auto bit = [&](int n) { return lower.bit(9, first_bit + n); };
    return ThresholdFlags{bit(0), bit(1), bit(2), bit(3)};
  };
  ModuleFlags flags{.temperature = module_flags(0), .supply = module_flags(4), .lanes = {}};
  for (int bank = 0; bank < cmis_banks(*page01); ++bank) {
    const auto status = page_of(pages, cmis_lane_status(bank));
    if (!status) return std::unexpected(status.error());
    for (int lane = 0; lane < kCmisLanesPerBank; ++lane) {
      const std::size_t field = 2 * static_cast<std::size_t>(lane);
      reading.lanes.push_back({
          .tx_bias_amperes = if_implemented(tx_bias, bias_at(*status, 170 + field)),
          .tx_power_watts = if_implemented(tx_power, watts(status->u16(154 + field))),
          .rx_power_watts = if_implemented(rx_power, watts(status->u16(186 + field))),
      });
      flags.lanes.push_back(cmis_lane_flags(*status, lane));
    }
  }
  reading.flags = std::move(flags);

  // Page 02h holds the thresholds: without it the module reports none.
  const auto page02 = optional_page_of(pages, kCmisThresholds);
  if (!page02) return std::unexpected(page02.error());
  if (*page02) {
    const PageBytes& limits = **page02;
    reading.thresholds = ModuleThresholds{
        .temperature_celsius =
            thresholds_at(128, [&](std::size_t at) { return celsius(limits.s16(at)); }),
        .supply_volts = thresholds_at(136, [&](std::size_t at) { return volts(limits.u16(at)); }),
        .tx_bias_amperes = thresholds_at(184, [&](std::size_t at) { return bias_at(limits, at); }),
        .tx_power_watts = thresholds_at(176, [&](std::size_t at) { return watts(limits.u16(at)); }),
        .rx_power_watts = thresholds_at(192, [&](std::size_t at) { return watts(limits.u16(at)); }),
    };
  }
  return reading;
}

// The lower page and the family its identifier names.
std::expected<std::pair<PageBytes, ModuleFamily>, ModuleError> lower_page(
    const ModulePages& pages) {
  const auto lower = page_of(pages, kLowerPage);
  if (!lower) return std::unexpected(lower.error());
  const std::uint8_t identifier = lower->u8(0);
  const auto family = family_of(identifier);
  if (!family) {
    return failure(ModuleErrorKind::kUnknownIdentifier,
                   "identifier " + hex(identifier) + " (lower page byte 0)");
  }
  return std::pair(*lower, *family);
}

}  // namespace

std::string_view to_string(ModuleErrorKind kind) {
  return name_of(kErrorNames, kind);
}

std::string_view to_string(ModuleFamily family) {
  return name_of(kFamilyNames, family);
}

std::expected<std::vector<ModulePage>, ModuleError> module_pages_to_read(
    const ModulePages& read_so_far) {
  if (!read_so_far.contains(kLowerPage)) return std::vector{kLowerPage};
  const auto lower = lower_page(read_so_far);
  if (!lower) return std::unexpected(lower.error());
  const auto& [page, family] = *lower;
  std::vector<ModulePage> wanted{kLowerPage};
  switch (family) {
    case ModuleFamily::kSff8472:
      if (!sff8472_without_diagnostics(page)) wanted.push_back(kSfpDiagnostics);
      break;
    case ModuleFamily::kSff8636:
      wanted.push_back(kUpperPage00);
      if (!sff8636_flat(page)) wanted.push_back(kSff8636Thresholds);
      break;
    case ModuleFamily::kCmis:
      wanted.push_back(kUpperPage00);
      if (cmis_flat(page)) break;
      wanted.push_back(kCmisAdvertising);
      wanted.push_back(kCmisThresholds);
      // The banks of page 11h are known once page 01h is.
      if (const auto page01 = page_of(read_so_far, kCmisAdvertising)) {
        for (int bank = 0; bank < cmis_banks(*page01); ++bank) {
          wanted.push_back(cmis_lane_status(bank));
        }
      }
      break;
  }
  return wanted;
}

std::expected<ModuleIdentity, ModuleError> decode_module_identity(const ModulePages& pages) {
  const auto lower = lower_page(pages);
  if (!lower) return std::unexpected(lower.error());
  const auto& [page, family] = *lower;
  switch (family) {
    case ModuleFamily::kSff8472: {
      const auto a0 = sff8472_base(pages);
      if (!a0) return std::unexpected(a0.error());
      return sff8472_identity(*a0);
    }
    case ModuleFamily::kSff8636: {
      const auto page00 = sff8636_page00(pages);
      if (!page00) return std::unexpected(page00.error());
      return sff8636_identity(page, *page00);
    }
    case ModuleFamily::kCmis: {
      const auto page00 = cmis_page00(pages);
      if (!page00) return std::unexpected(page00.error());
      return cmis_identity(page, *page00);
    }
  }
  std::unreachable();
}

std::expected<ModuleReading, ModuleError> decode_module(const ModulePages& pages) {
  const auto lower = lower_page(pages);
  if (!lower) return std::unexpected(lower.error());
  const auto& [page, family] = *lower;
  switch (family) {
    case ModuleFamily::kSff8472:
      return decode_sff8472(pages);
    case ModuleFamily::kSff8636:
      return decode_sff8636(pages, page);
    case ModuleFamily::kCmis:
      return decode_cmis(pages, page);
  }
  std::unreachable();
}

}  // namespace ibprobe::collectors
