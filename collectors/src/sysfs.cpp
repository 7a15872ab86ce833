#include "sysfs.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <system_error>

namespace ibprobe::collectors {
namespace {

constexpr std::string_view kWhitespace = " \t\r\n";

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(kWhitespace);
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(kWhitespace);
  return text.substr(first, last - first + 1);
}

// Closes the descriptor on every path out of read_text.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

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

Read<std::string> read_text(const std::filesystem::path& file) {
  FileDescriptor fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) return Read<std::string>::fail(classify_errno(errno));
  // sysfs attributes are at most one page; anything longer is not a value we understand.
  char buffer[4096];
  std::size_t used = 0;
  while (used < sizeof(buffer)) {
    const ssize_t n = ::read(fd.get(), buffer + used, sizeof(buffer) - used);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Read<std::string>::fail(classify_errno(errno));
    }
    if (n == 0) break;
    used += static_cast<std::size_t>(n);
  }
  if (used == sizeof(buffer)) return Read<std::string>::fail(ReadError::kMalformed);
  return Read<std::string>::ok(std::string(trim(std::string_view(buffer, used))));
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

Read<std::uint64_t> read_counter(const std::filesystem::path& file) {
  auto text = read_text(file);
  if (!text) return Read<std::uint64_t>::fail(text.error);
  return parse_counter(*text.value);
}

std::vector<std::string> list_entries(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::optional<std::string> read_text_or_record(const std::filesystem::path& file,
                                               ErrorSink& errors) {
  auto text = read_text(file);
  if (!text) {
    errors.record(text.error, file);
    return std::nullopt;
  }
  return std::move(text.value);
}

std::optional<std::uint64_t> read_counter_or_record(const std::filesystem::path& file,
                                                    ErrorSink& errors) {
  auto value = read_counter(file);
  if (!value) {
    errors.record(value.error, file);
    return std::nullopt;
  }
  return value.value;
}

}  // namespace ibprobe::collectors
