// The parsers of sysfs attribute values: counters ("%llu\n" or "N/A (no PMA)"), port rate
// ("40 Gb/sec (4X QDR)"), enum-prefixed states ("4: ACTIVE"), hex LIDs ("0x1a"), driver counter
// names, and the attribute read itself (through a real file). Each accepted value is checked
// against a plain reference reading of the same format, or against what the format promises.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "collectors_internal.h"
#include "counter_table.h"
#include "fuzz.h"
#include "sysfs.h"

namespace {

using namespace ibprobe::collectors;

constexpr std::size_t kPageSize = 4096;  // a sysfs attribute is at most one page

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::string_view(" \t\r\n").find(text.front()) != std::string_view::npos)
    text.remove_prefix(1);
  while (!text.empty() && std::string_view(" \t\r\n").find(text.back()) != std::string_view::npos)
    text.remove_suffix(1);
  return text;
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// Decimal digits only, fitting 64 bits.
std::optional<std::uint64_t> reference_decimal(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::uint64_t value = 0;
  for (char c : text) {
    if (!is_digit(c)) return std::nullopt;
    if (__builtin_mul_overflow(value, 10, &value) ||
        __builtin_add_overflow(value, static_cast<std::uint64_t>(c - '0'), &value)) {
      return std::nullopt;
    }
  }
  return value;
}

std::optional<unsigned> reference_hex(std::string_view text) {
  if (text.starts_with("0x") || text.starts_with("0X")) text.remove_prefix(2);
  if (text.empty()) return std::nullopt;
  unsigned value = 0;
  for (char c : text) {
    int digit = -1;
    if (is_digit(c)) digit = c - '0';
    if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    if (digit < 0) return std::nullopt;
    if (__builtin_mul_overflow(value, 16u, &value) ||
        __builtin_add_overflow(value, static_cast<unsigned>(digit), &value)) {
      return std::nullopt;
    }
  }
  return value;
}

void check_counter(std::string_view text, const Read<std::uint64_t>& parsed) {
  const auto trimmed = trim(text);
  if (trimmed.starts_with("N/A")) {
    FUZZ_CHECK(!parsed && parsed.error() == ReadError::kNoPma, "N/A value not reported as no_pma");
    return;
  }
  const auto expected = reference_decimal(trimmed);
  const std::optional<std::uint64_t> value = parsed ? std::optional(*parsed) : std::nullopt;
  FUZZ_CHECK(value == expected, "counter '%.*s' parsed as %s", static_cast<int>(text.size()),
             text.data(), parsed ? std::to_string(*parsed).c_str() : "error");
  if (!parsed) FUZZ_CHECK(parsed.error() == ReadError::kMalformed, "wrong error kind");
}

void check_rate(std::string_view text) {
  const auto rate = parse_rate(text);
  if (!rate) return;
  FUZZ_CHECK(std::isfinite(rate->gigabits_per_second) && rate->gigabits_per_second >= 0,
             "rate '%.*s' parsed as %g Gb/s", static_cast<int>(text.size()), text.data(),
             rate->gigabits_per_second);
  FUZZ_CHECK(rate->lanes >= 0, "lanes %d", rate->lanes);
  if (rate->lanes > 0) {
    FUZZ_CHECK(text.find(std::to_string(rate->lanes) + "X") != std::string_view::npos,
               "lanes %d not in '%.*s'", rate->lanes, static_cast<int>(text.size()), text.data());
  }
  FUZZ_CHECK(text.find(rate->speed) != std::string_view::npos, "speed not taken from the text");
}

void check_enum_prefix(std::string_view text) {
  const auto value = parse_enum_prefix(text);
  if (!value) return;
  auto prefix = text.substr(0, text.find(':'));
  FUZZ_CHECK(text.find(':') != std::string_view::npos, "accepted without a colon");
  if (prefix.starts_with('-')) prefix.remove_prefix(1);
  FUZZ_CHECK(!prefix.empty() && std::all_of(prefix.begin(), prefix.end(), is_digit),
             "accepted a non-numeric prefix '%.*s'", static_cast<int>(prefix.size()),
             prefix.data());
}

void check_hex(std::string_view text) {
  const auto value = parse_hex(text);
  FUZZ_CHECK(value == reference_hex(text), "hex '%.*s' parsed as %s", static_cast<int>(text.size()),
             text.data(), value ? std::to_string(*value).c_str() : "nothing");
}

bool metric_name_char(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

void check_counter_name(std::string_view text) {
  const std::string name = sanitize_counter_name(text);
  FUZZ_CHECK(!name.empty() && std::all_of(name.begin(), name.end(), metric_name_char),
             "sanitized name '%s' has characters outside [A-Za-z0-9_]", name.c_str());
  FUZZ_CHECK(name.find("__") == std::string::npos, "'%s' has a run of underscores", name.c_str());
  FUZZ_CHECK(name == "_" || (name.front() != '_' && name.back() != '_'),
             "'%s' starts or ends with an underscore", name.c_str());
  FUZZ_CHECK(sanitize_counter_name(name) == name, "sanitizing '%s' again changes it", name.c_str());

  for (bool legacy : {false, true}) {
    if (const CounterSpec* spec = find_port_counter(text, legacy)) {
      FUZZ_CHECK(legacy || spec->counter == text, "file '%.*s' found as counter %.*s",
                 static_cast<int>(text.size()), text.data(), static_cast<int>(spec->counter.size()),
                 spec->counter.data());
      FUZZ_CHECK(spec->scale > 0 && (spec->width == kTableWidth || spec->width > 0),
                 "bad spec for %.*s", static_cast<int>(text.size()), text.data());
    }
  }
}

std::filesystem::path scratch_dir;

// The same bytes as a real attribute file, read the way the collectors read sysfs.
void check_attribute_read(std::string_view content) {
  {
    std::ofstream file(scratch_dir / "value", std::ios::binary | std::ios::trunc);
    file.write(content.data(), static_cast<std::streamsize>(content.size()));
  }
  const SysfsDir dir(scratch_dir);
  const auto text = dir.read_text("value");
  const auto counter = dir.read_counter("value");
  if (content.size() > kPageSize) {
    FUZZ_CHECK(!text && text.error() == ReadError::kMalformed, "over-page attribute read as text");
    FUZZ_CHECK(!counter && counter.error() == ReadError::kMalformed,
               "over-page attribute read as a counter");
    return;
  }
  FUZZ_CHECK(text && *text == trim(content), "read_text differs from the file's content");
  check_counter(content, counter);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // tmpfs when there is one: a file written and read per input on a disk costs ten times more.
  const char* tmp = std::getenv("TMPDIR");
  std::string base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (tmp && *tmp ? tmp : "/tmp");
  std::string pattern = base + "/ibprobe-fuzz-sysfs-XXXXXX";
  if (!::mkdtemp(pattern.data())) std::abort();
  scratch_dir = pattern;
  // Leaves nothing behind on a normal exit; a crash leaves the directory for inspection.
  std::atexit([] { std::filesystem::remove_all(scratch_dir); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text = ibprobe::fuzz::text(data, size);
  check_counter(text, parse_counter(text));
  check_rate(text);
  check_enum_prefix(text);
  check_hex(text);
  check_counter_name(text);
  check_attribute_read(text);
  return 0;
}
