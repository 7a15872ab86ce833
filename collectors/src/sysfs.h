// Reading the kernel's sysfs attribute files: one small text value per file, where the read
// itself can fail with an errno chosen by the driver. Files are opened relative to an open
// directory descriptor: a scrape reads hundreds of files in a few directories, and resolving
// the full path (with its class/ symlink) for each of them would dominate the cost.
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

// A counter value as the kernel prints it ("%llu\n"); "N/A (no PMA)" and anything that is not
// a plain unsigned decimal fitting 64 bits are errors.
Read<std::uint64_t> parse_counter(std::string_view text);

// An open sysfs directory. A directory that could not be opened behaves as an empty one.
class SysfsDir {
 public:
  explicit SysfsDir(std::filesystem::path path);
  SysfsDir(const SysfsDir& parent, std::string_view name);
  SysfsDir(SysfsDir&& other) noexcept;
  SysfsDir& operator=(SysfsDir&&) = delete;
  SysfsDir(const SysfsDir&) = delete;
  ~SysfsDir();

  bool is_open() const { return fd_ >= 0; }
  const std::filesystem::path& path() const { return path_; }

  // The file's content with surrounding white space removed.
  Read<std::string> read_text(std::string_view name) const;
  Read<std::uint64_t> read_counter(std::string_view name) const;
  // Names in the directory, sorted.
  std::vector<std::string> entries() const;

  // The same reads, reporting a failure to `errors` with the file's path.
  std::optional<std::string> read_text(std::string_view name, ErrorSink& errors) const;
  std::optional<std::uint64_t> read_counter(std::string_view name, ErrorSink& errors) const;

 private:
  int fd_;
  std::filesystem::path path_;
};

// Whole-path conveniences for single reads.
Read<std::string> read_text(const std::filesystem::path& file);
Read<std::uint64_t> read_counter(const std::filesystem::path& file);

}  // namespace ibprobe::collectors
