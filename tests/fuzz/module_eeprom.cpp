// The transceiver module memory decoders over any bytes a module can hand back. The input is cut
// into the pages module_pages_to_read asks for, 128 bytes each in the order it asks (the last may
// come short; a page asked after the input ran out is a failed read), as a reader would fetch
// them. Checked: the reads asked stay few and distinct; a decoded module agrees with its identity
// alone, with its check codes summed byte by byte, and with plain readings of its monitors.
#include "ibprobe/module_eeprom.h"

#include <cmath>
#include <set>
#include <vector>

#include "fuzz.h"

namespace {

using namespace ibprobe::collectors;

// Lower page, page 00h, 01h, 02h and page 11h in up to four banks: the most any memory map asks.
constexpr std::size_t kMostReads = 8;

struct Read {
  ModulePages pages;
  std::vector<ModulePage> asked;
};

Read read_module(std::span<const std::uint8_t> input) {
  Read read;
  std::set<ModulePage> seen;
  std::size_t at = 0;
  for (bool more = true; more;) {
    more = false;
    const auto wanted = module_pages_to_read(read.pages);
    if (!wanted) break;
    for (const auto& page : *wanted) {
      if (!seen.insert(page).second) continue;
      more = true;
      read.asked.push_back(page);
      if (at >= input.size()) continue;
      const std::size_t length = std::min(kModulePageSize, input.size() - at);
      read.pages[page].assign(input.begin() + static_cast<std::ptrdiff_t>(at),
                              input.begin() + static_cast<std::ptrdiff_t>(at + length));
      at += length;
    }
  }
  return read;
}

// Byte `offset` of a page, numbered as the specifications number it (upper pages from 128).
std::uint8_t byte_at(const ModulePages& pages, const ModulePage& page, std::size_t offset) {
  return pages.at(page)[offset - page.offset];
}

std::int16_t s16_at(const ModulePages& pages, const ModulePage& page, std::size_t offset) {
  return static_cast<std::int16_t>(byte_at(pages, page, offset) << 8 |
                                   byte_at(pages, page, offset + 1));
}

bool check_code_holds(const ModulePages& pages, const ModulePage& page, std::size_t first,
                      std::size_t last, std::size_t code_at) {
  unsigned sum = 0;
  for (std::size_t offset = first; offset <= last; ++offset) sum += byte_at(pages, page, offset);
  return (sum & 0xff) == byte_at(pages, page, code_at);
}

void check_text(const std::string& text, const char* field) {
  for (char c : text) {
    FUZZ_CHECK(c >= 0x20 && c <= 0x7e, "%s holds byte 0x%02x", field, static_cast<unsigned>(c));
  }
  FUZZ_CHECK(text.empty() || (text.front() != ' ' && text.back() != ' '), "%s '%s' untrimmed",
             field, text.c_str());
}

void check_finite(const std::optional<double>& value, const char* what) {
  FUZZ_CHECK(!value || std::isfinite(*value), "%s is %g", what, *value);
}

void check_reading(const Read& read, const ModuleReading& reading) {
  const ModulePages& pages = read.pages;
  constexpr ModulePage kPage00{.offset = 128};
  const auto identity = decode_module_identity(pages);
  FUZZ_CHECK(identity && *identity == reading.identity, "identity differs from the reading's");
  FUZZ_CHECK(reading.identity.identifier == byte_at(pages, kLowerPage, 0), "identifier misread");
  check_text(reading.identity.vendor, "vendor");
  check_text(reading.identity.part_number, "part number");
  check_text(reading.identity.revision, "revision");
  check_text(reading.identity.serial_number, "serial number");
  if (reading.flags) {
    FUZZ_CHECK(reading.flags->lanes.size() == reading.lanes.size(), "%zu lane flags, %zu lanes",
               reading.flags->lanes.size(), reading.lanes.size());
  }

  // Internally calibrated values are counts times a unit: always finite.
  bool finite = true;
  switch (reading.identity.family) {
    case ModuleFamily::kSff8472: {
      const ModulePage a2{.i2c_address = kSfpDiagnosticsAddress};
      FUZZ_CHECK(reading.lanes.size() == 1, "%zu SFP lanes", reading.lanes.size());
      FUZZ_CHECK(check_code_holds(pages, kLowerPage, 0, 62, 63) &&
                     check_code_holds(pages, kLowerPage, 64, 94, 95) &&
                     check_code_holds(pages, a2, 0, 94, 95),
                 "decoded an SFP whose check codes do not hold");
      const bool external = (byte_at(pages, kLowerPage, 92) >> 4) & 1;
      finite = !external;
      if (!external) {
        FUZZ_CHECK(*reading.temperature_celsius == s16_at(pages, a2, 96) / 256.0,
                   "SFP temperature misread");
      }
      break;
    }
    case ModuleFamily::kSff8636:
      FUZZ_CHECK(reading.lanes.size() == 4, "%zu QSFP lanes", reading.lanes.size());
      FUZZ_CHECK(check_code_holds(pages, kPage00, 128, 190, 191) &&
                     check_code_holds(pages, kPage00, 192, 222, 223),
                 "decoded a QSFP whose check codes do not hold");
      FUZZ_CHECK(*reading.temperature_celsius == s16_at(pages, kLowerPage, 22) / 256.0,
                 "QSFP temperature misread");
      break;
    case ModuleFamily::kCmis:
      FUZZ_CHECK(
          reading.lanes.size() == 8 || reading.lanes.size() == 16 || reading.lanes.size() == 32,
          "%zu CMIS lanes", reading.lanes.size());
      FUZZ_CHECK(check_code_holds(pages, kPage00, 128, 221, 222),
                 "decoded a CMIS module whose check code does not hold");
      FUZZ_CHECK(!reading.temperature_celsius ||
                     *reading.temperature_celsius == s16_at(pages, kLowerPage, 14) / 256.0,
                 "CMIS temperature misread");
      break;
  }
  if (!finite) return;
  check_finite(reading.temperature_celsius, "temperature");
  check_finite(reading.supply_volts, "supply");
  for (const auto& lane : reading.lanes) {
    check_finite(lane.tx_bias_amperes, "tx bias");
    check_finite(lane.tx_power_watts, "tx power");
    check_finite(lane.rx_power_watts, "rx power");
    FUZZ_CHECK(!lane.rx_power_watts || *lane.rx_power_watts >= 0, "negative receive power");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const Read read = read_module(ibprobe::fuzz::bytes(data, size));
  FUZZ_CHECK(!read.asked.empty() && read.asked.front() == kLowerPage,
             "the lower page is not the first read");
  FUZZ_CHECK(read.asked.size() <= kMostReads, "%zu reads asked", read.asked.size());
  const auto reading = decode_module(read.pages);
  if (reading) {
    check_reading(read, *reading);
  } else {
    FUZZ_CHECK(!reading.error().message.empty(), "an error without words");
    (void)to_string(reading.error().kind);
  }
  return 0;
}
