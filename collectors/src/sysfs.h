// Reading the kernel's sysfs attribute files: one small text value per file, where the read
// itself can fail with an errno chosen by the driver.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ibprobe/collectors.h"

namespace ibprobe::collectors {

template <class T>
struct Read {
  std::optional<T> value;
  ReadError error = ReadError::kIo;

  static Read ok(T v) { return Read{std::move(v), ReadError::kIo}; }
  static Read fail(ReadError e) { return Read{std::nullopt, e}; }
  explicit operator bool() const { return value.has_value(); }
};

ReadError classify_errno(int err);

// The file's content with surrounding white space removed.
Read<std::string> read_text(const std::filesystem::path& file);

// A counter value as the kernel prints it ("%llu\n"); "N/A (no PMA)" and anything that is not
// a plain unsigned decimal fitting 64 bits are errors.
Read<std::uint64_t> parse_counter(std::string_view text);
Read<std::uint64_t> read_counter(const std::filesystem::path& file);

// Names in a directory, sorted; empty when the directory is missing or unreadable.
std::vector<std::string> list_entries(const std::filesystem::path& dir);

// Reads a file and reports failures to `errors`; nullopt when it failed.
std::optional<std::string> read_text_or_record(const std::filesystem::path& file,
                                               ErrorSink& errors);
std::optional<std::uint64_t> read_counter_or_record(const std::filesystem::path& file,
                                                    ErrorSink& errors);

}  // namespace ibprobe::collectors
