#include "sysfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>

namespace ibprobe::collectors {
namespace {

constexpr std::string_view kWhitespace = " \t\r\n";

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(kWhitespace);
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(kWhitespace);
  return text.substr(first, last - first + 1);
}

// sysfs attributes are at most one page; anything longer is not a value we understand.
constexpr std::size_t kMaxAttributeSize = 4096;

struct RawRead {
  std::size_t size = 0;
  int error = 0;
};

// Reads a whole attribute into `buffer` (kMaxAttributeSize + 1 bytes) through `dir_fd`.
RawRead read_attribute(int dir_fd, const char* name, char* buffer) {
  const int fd = ::openat(dir_fd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return {0, errno};
  RawRead result;
  while (result.size <= kMaxAttributeSize) {
    const std::size_t space = kMaxAttributeSize + 1 - result.size;
    const ssize_t n = ::read(fd, buffer + result.size, space);
    if (n < 0) {
      if (errno == EINTR) continue;
      result.error = errno;
      break;
    }
    result.size += static_cast<std::size_t>(n);
    // sysfs hands out the whole attribute in the first read; a short read means we have it all.
    if (n == 0 || static_cast<std::size_t>(n) < space) break;
  }
  ::close(fd);
  return result;
}

template <class T>
Read<T> attribute_failure(const RawRead& raw) {
  if (raw.error != 0) return Read<T>::fail(classify_errno(raw.error));
  return Read<T>::fail(ReadError::kMalformed);
}

}  // namespace

std::string_view to_string(ReadError error) {
  switch (error) {
    case ReadError::kNotFound:
      return "not_found";
    case ReadError::kPermission:
      return "permission_denied";
    case ReadError::kInvalid:
      return "invalid_argument";
    case ReadError::kNotSupported:
      return "not_supported";
    case ReadError::kNotImplemented:
      return "not_implemented";
    case ReadError::kNoPma:
      return "no_pma";
    case ReadError::kMalformed:
      return "malformed";
    case ReadError::kIo:
      return "io_error";
    case ReadError::kTimeout:
      return "timeout";
    case ReadError::kMadStatus:
      return "mad_status";
    case ReadError::kBudgetExceeded:
      return "budget_exceeded";
  }
  return "io_error";
}

ReadError classify_errno(int err) {
  switch (err) {
    case ENOENT:
    case ENODEV:
    case ENXIO:
      return ReadError::kNotFound;
    case EPERM:
    case EACCES:
      return ReadError::kPermission;
    case EINVAL:
      return ReadError::kInvalid;
    case EOPNOTSUPP:
      return ReadError::kNotSupported;
    case ENOSYS:
      return ReadError::kNotImplemented;
    default:
      return ReadError::kIo;
  }
}

Read<std::uint64_t> parse_counter(std::string_view text) {
  text = trim(text);
  if (text.starts_with("N/A")) return Read<std::uint64_t>::fail(ReadError::kNoPma);
  if (text.empty() ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return Read<std::uint64_t>::fail(ReadError::kMalformed);
  }
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return Read<std::uint64_t>::fail(ReadError::kMalformed);
  }
  return Read<std::uint64_t>::ok(value);
}

SysfsDir::SysfsDir(std::filesystem::path path)
    : fd_(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)), path_(std::move(path)) {}

SysfsDir::SysfsDir(const SysfsDir& parent, std::string_view name)
    : fd_(-1), path_(parent.path_ / name) {
  if (parent.fd_ >= 0) {
    fd_ = ::openat(parent.fd_, std::string(name).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  }
}

SysfsDir::SysfsDir(SysfsDir&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) {
  other.fd_ = -1;
}

SysfsDir::~SysfsDir() {
  if (fd_ >= 0) ::close(fd_);
}

Read<std::string> SysfsDir::read_text(std::string_view name) const {
  if (fd_ < 0) return Read<std::string>::fail(ReadError::kNotFound);
  char buffer[kMaxAttributeSize + 1];
  const auto raw = read_attribute(fd_, std::string(name).c_str(), buffer);
  if (raw.error != 0 || raw.size > kMaxAttributeSize) return attribute_failure<std::string>(raw);
  return Read<std::string>::ok(std::string(trim(std::string_view(buffer, raw.size))));
}

Read<std::uint64_t> SysfsDir::read_counter(std::string_view name) const {
  if (fd_ < 0) return Read<std::uint64_t>::fail(ReadError::kNotFound);
  char buffer[kMaxAttributeSize + 1];
  const auto raw = read_attribute(fd_, std::string(name).c_str(), buffer);
  if (raw.error != 0 || raw.size > kMaxAttributeSize) return attribute_failure<std::uint64_t>(raw);
  return parse_counter(std::string_view(buffer, raw.size));
}

std::vector<std::string> SysfsDir::entries() const {
  std::vector<std::string> names;
  if (fd_ < 0) return names;
  // fdopendir takes ownership of the descriptor it is given, so hand it a duplicate.
  const int fd = ::openat(fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return names;
  DIR* dir = ::fdopendir(fd);
  if (!dir) {
    ::close(fd);
    return names;
  }
  while (const dirent* entry = ::readdir(dir)) {
    const std::string_view name = entry->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

std::optional<std::string> SysfsDir::read_text(std::string_view name, ErrorSink& errors) const {
  auto text = read_text(name);
  if (!text) {
    errors.record(text.error, path_ / name);
    return std::nullopt;
  }
  return std::move(text.value);
}

std::optional<std::uint64_t> SysfsDir::read_counter(std::string_view name,
                                                    ErrorSink& errors) const {
  auto value = read_counter(name);
  if (!value) {
    errors.record(value.error, path_ / name);
    return std::nullopt;
  }
  return value.value;
}

Read<std::string> read_text(const std::filesystem::path& file) {
  return SysfsDir(file.parent_path()).read_text(file.filename().native());
}

Read<std::uint64_t> read_counter(const std::filesystem::path& file) {
  return SysfsDir(file.parent_path()).read_counter(file.filename().native());
}

}  // namespace ibprobe::collectors
