#include "sysfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <map>
#include <mutex>
#include <typeindex>

#include "ibprobe/enum_names.h"

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

// Reads a whole attribute from offset 0 into `buffer` (kMaxAttributeSize + 1 bytes).
RawRead read_attribute(int fd, char* buffer) {
  RawRead result;
  while (result.size <= kMaxAttributeSize) {
    const std::size_t space = kMaxAttributeSize + 1 - result.size;
    // The system call itself rather than pread(): the wrapper is a cancellation point, and in a
    // process with threads it switches asynchronous cancellation on and off around every call,
    // 4 % of a scrape's instructions in user space. No thread of ours is ever cancelled.
    const auto n = static_cast<ssize_t>(
        ::syscall(SYS_pread64, fd, buffer + result.size, space, static_cast<off_t>(result.size)));
    if (n < 0) {
      if (errno == EINTR) continue;
      result.error = errno;
      break;
    }
    result.size += static_cast<std::size_t>(n);
    // sysfs hands out the whole attribute in the first read; a short read means we have it all.
    if (n == 0 || static_cast<std::size_t>(n) < space) break;
  }
  return result;
}

constexpr int kAttributeFlags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
constexpr int kDirectoryFlags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;

// `name` in the directory `dir_fd`, or by its whole path `dir_path / name` when the directory
// keeps no descriptor.
UniqueFd open_in(int dir_fd, const std::filesystem::path& dir_path, const std::string& name,
                 int flags) {
  if (dir_fd >= 0) return UniqueFd(::openat(dir_fd, name.c_str(), flags));
  return UniqueFd(::open((dir_path / name).c_str(), flags));
}

// The kernel's answer to a read through a descriptor of a file that is gone.
bool invalidated(int error) {
  return error == ENODEV || error == ENOENT || error == ESTALE;
}

// Descriptors the caches may keep open, process-wide, directories and files alike: half the
// soft RLIMIT_NOFILE, so that a host with many ports (a RoCE port alone has 256 GID files, a
// device a dozen directories) leaves the rest to sockets and everything else. Beyond it, a
// directory is reached by its path and a file is opened for each read and closed again.
class DescriptorBudget {
 public:
  static DescriptorBudget& instance() {
    static DescriptorBudget budget;
    return budget;
  }
  bool acquire() {
    if (available_.fetch_sub(1, std::memory_order_relaxed) > 0) return true;
    available_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  void release(std::size_t count) {
    available_.fetch_add(static_cast<long>(count), std::memory_order_relaxed);
  }

 private:
  DescriptorBudget() {
    rlimit limit{};
    long soft = 1024;
    if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
      soft = static_cast<long>(std::min<rlim_t>(limit.rlim_cur, rlim_t{1} << 24));
    } else if (limit.rlim_cur == RLIM_INFINITY) {
      soft = long{1} << 24;
    }
    available_ = soft / 2;
  }
  std::atomic<long> available_;
};

std::unexpected<ReadError> attribute_failure(const RawRead& raw) {
  if (raw.error != 0) return std::unexpected(classify_errno(raw.error));
  return std::unexpected(ReadError::kMalformed);
}

// What a read into `buffer` yields: its text with surrounding white space removed, or its counter.
Read<std::string> text_of(const RawRead& raw, const char* buffer) {
  if (raw.error != 0 || raw.size > kMaxAttributeSize) return attribute_failure(raw);
  return std::string(trim(std::string_view(buffer, raw.size)));
}

Read<std::uint64_t> counter_of(const RawRead& raw, const char* buffer) {
  if (raw.error != 0 || raw.size > kMaxAttributeSize) return attribute_failure(raw);
  return parse_counter(std::string_view(buffer, raw.size));
}

constexpr EnumNames<ReadError, 12> kReadErrorNames{
    {{ReadError::kNotFound, "not_found"},
     {ReadError::kPermission, "permission_denied"},
     {ReadError::kInvalid, "invalid_argument"},
     {ReadError::kNotSupported, "not_supported"},
     {ReadError::kNotImplemented, "not_implemented"},
     {ReadError::kNoPma, "no_pma"},
     {ReadError::kMalformed, "malformed"},
     {ReadError::kIo, "io_error"},
     {ReadError::kTooManyOpenFiles, "too_many_open_files"},
     {ReadError::kTimeout, "timeout"},
     {ReadError::kMadStatus, "mad_status"},
     {ReadError::kBudgetExceeded, "budget_exceeded"}}};

}  // namespace

std::string_view to_string(ReadError error) {
  return name_of(kReadErrorNames, error, "io_error");
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
    case EMFILE:
    case ENFILE:
      return ReadError::kTooManyOpenFiles;
    default:
      return ReadError::kIo;
  }
}

Read<std::uint64_t> parse_counter(std::string_view text) {
  // The kernel's own form, digits and a newline, in one pass: a scrape parses hundreds. Up to
  // 19 digits cannot overflow; anything else takes the general path.
  if (text.size() >= 2 && text.size() <= 20 && text.back() == '\n') {
    std::uint64_t value = 0;
    std::size_t i = 0;
    for (; i + 1 < text.size(); ++i) {
      const auto digit = static_cast<unsigned>(text[i] - '0');
      if (digit > 9) break;
      value = value * 10 + digit;
    }
    if (i + 1 == text.size()) return value;
  }
  text = trim(text);
  if (text.starts_with("N/A")) return std::unexpected(ReadError::kNoPma);
  if (text.empty() ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::unexpected(ReadError::kMalformed);
  }
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return std::unexpected(ReadError::kMalformed);
  }
  return value;
}

std::vector<DirectoryEntry> read_directory(int fd) {
  std::vector<DirectoryEntry> entries;
  if (fd < 0 || ::lseek(fd, 0, SEEK_SET) != 0) return entries;
  alignas(dirent64) char buffer[16384];
  for (;;) {
    const ssize_t n = ::getdents64(fd, buffer, sizeof buffer);
    if (n <= 0) break;
    for (ssize_t offset = 0; offset < n;) {
      const auto* entry = reinterpret_cast<const dirent64*>(buffer + offset);
      offset += entry->d_reclen;
      const std::string_view name = entry->d_name;
      if (name != "." && name != "..") entries.push_back({std::string(name), entry->d_ino});
    }
  }
  return entries;
}

namespace {

std::vector<std::string> sorted_names(int fd) {
  std::vector<std::string> names;
  for (auto& entry : read_directory(fd)) names.push_back(std::move(entry.name));
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

// What all directories opened from one root share.
struct SysfsDir::Tree {
  std::atomic<bool> stale = false;
};

namespace {

// A directory as opened: its descriptor, kept when the budget allows, and whether it exists.
struct OpenedDirectory {
  UniqueFd fd;
  int error = 0;  // the errno of an open that failed; 0 when the directory exists
};

OpenedDirectory open_directory(int parent_fd, const std::filesystem::path& parent_path,
                               const std::string& name) {
  OpenedDirectory dir{open_in(parent_fd, parent_path, name, kDirectoryFlags), 0};
  if (!dir.fd) {
    dir.error = errno;
  } else if (!DescriptorBudget::instance().acquire()) {
    dir.fd.reset();
  }
  return dir;
}

// Out of descriptors: the directory may well exist, and a later open may succeed.
bool out_of_descriptors(int error) {
  return error == EMFILE || error == ENFILE;
}

}  // namespace

struct SysfsDir::Node {
  Node(OpenedDirectory dir, std::filesystem::path dir_path, std::shared_ptr<Tree> owner)
      : fd(std::move(dir.fd)),
        open_error(dir.error),
        path(std::move(dir_path)),
        tree(std::move(owner)) {}
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  ~Node() { DescriptorBudget::instance().release(files.size() + (fd ? 1 : 0)); }

  bool exists() const { return open_error == 0; }

  // A read of a directory that could not be opened fails as its open did.
  RawRead missing() const { return {0, open_error}; }

  std::shared_ptr<Node> child(std::string_view name) {
    std::lock_guard lock(mutex);
    if (const auto it = children.find(name); it != children.end()) return it->second;
    OpenedDirectory dir;
    dir.error = open_error;
    if (exists()) dir = open_directory(fd.get(), path, std::string(name));
    auto node = std::make_shared<Node>(std::move(dir), path / name, tree);
    // Not kept when the process was out of descriptors: the next look-up opens it again.
    if (!out_of_descriptors(node->open_error)) children.emplace(std::string(name), node);
    return node;
  }

  UniqueFd open_file(const std::string& name) const {
    return open_in(fd.get(), path, name, kAttributeFlags);
  }

  // With `kept`, the descriptor read through is stored there when it stays open.
  RawRead read(std::string_view name, char* buffer, std::atomic<int>* kept = nullptr) {
    int file_fd = -1;
    {
      std::lock_guard lock(mutex);
      if (const auto it = files.find(name); it != files.end()) file_fd = it->second.get();
    }
    if (file_fd < 0) {
      std::string file_name(name);
      auto opened = open_file(file_name);
      if (!opened) return {0, errno};
      if (!DescriptorBudget::instance().acquire()) return read_attribute(opened.get(), buffer);
      std::lock_guard lock(mutex);
      // Another thread may have opened the same file meanwhile: keep one, close the other.
      const auto [it, inserted] = files.try_emplace(std::move(file_name), std::move(opened));
      if (!inserted) DescriptorBudget::instance().release(1);
      file_fd = it->second.get();
    }
    if (kept) kept->store(file_fd, std::memory_order_relaxed);
    auto raw = read_attribute(file_fd, buffer);
    if (raw.error == 0 || !invalidated(raw.error)) return raw;
    // The file behind the kept descriptor is gone. The descriptor stays (another thread may be
    // reading through it) until the tree is dropped; this read goes through a fresh open.
    tree->stale = true;
    const auto reopened = open_file(std::string(name));
    if (!reopened) return {0, errno};
    return read_attribute(reopened.get(), buffer);
  }

  // Set once and never changed after: the reference stays valid for the node's life.
  const std::vector<std::string>& entries() {
    std::lock_guard lock(mutex);
    if (!listing) {
      listing = names();
      listed_fds = std::make_unique<std::atomic<int>[]>(listing->size());
      for (std::size_t i = 0; i < listing->size(); ++i) listed_fds[i] = -1;
    }
    return *listing;
  }

  // read() of entries()[index]: a descriptor kept for a listed file is found by its position,
  // without a lock or a look-up by name, since a scrape reads whole listings.
  RawRead read_listed(std::size_t index, char* buffer) {
    const int kept = listed_fds[index].load(std::memory_order_relaxed);
    if (kept >= 0) {
      auto raw = read_attribute(kept, buffer);
      if (raw.error == 0 || !invalidated(raw.error)) return raw;
    }
    return read((*listing)[index], buffer, &listed_fds[index]);
  }

  std::optional<std::string> remembered(std::string_view name) {
    std::lock_guard lock(mutex);
    if (const auto it = static_texts.find(name); it != static_texts.end()) return it->second;
    return std::nullopt;
  }
  void remember(std::string_view name, const std::string& text) {
    std::lock_guard lock(mutex);
    static_texts.try_emplace(std::string(name), text);
  }

  // Sorted names in the directory, through its descriptor or a fresh open of its path.
  std::vector<std::string> names() const {
    if (fd || !exists()) return sorted_names(fd.get());
    const UniqueFd dir(::open(path.c_str(), kDirectoryFlags));
    return sorted_names(dir.get());
  }

  // Kept only while the budget allows; an existing directory without one goes by its path.
  const UniqueFd fd;
  const int open_error;
  const std::filesystem::path path;
  const std::shared_ptr<Tree> tree;

  std::mutex mutex;
  std::map<std::string, std::shared_ptr<Node>, std::less<>> children;
  std::map<std::string, UniqueFd, std::less<>> files;
  std::optional<std::vector<std::string>> listing;
  // By position in `listing`: descriptors owned by `files`, or -1 before a file's first read.
  std::unique_ptr<std::atomic<int>[]> listed_fds;
  std::map<std::string, std::string, std::less<>> static_texts;
  std::map<std::type_index, std::shared_ptr<const void>> derived;
};

SysfsDir::SysfsDir(std::filesystem::path path)
    : node_(std::make_shared<Node>(open_directory(-1, path, {}), path, std::make_shared<Tree>())) {}

SysfsDir::SysfsDir(const SysfsDir& parent, std::string_view name)
    : node_(parent.node_->child(name)) {}

SysfsDir::~SysfsDir() = default;

bool SysfsDir::is_open() const {
  return node_->exists();
}

const std::filesystem::path& SysfsDir::path() const {
  return node_->path;
}

int SysfsDir::fd() const {
  return node_->fd.get();
}

bool SysfsDir::stale() const {
  return node_->tree->stale;
}

Read<std::string> SysfsDir::read_text(std::string_view name) const {
  if (!is_open()) return attribute_failure(node_->missing());
  char buffer[kMaxAttributeSize + 1];
  const auto raw = node_->read(name, buffer);
  return text_of(raw, buffer);
}

Read<std::uint64_t> SysfsDir::read_counter(std::string_view name) const {
  if (!is_open()) return attribute_failure(node_->missing());
  char buffer[kMaxAttributeSize + 1];
  const auto raw = node_->read(name, buffer);
  return counter_of(raw, buffer);
}

Read<std::uint64_t> SysfsDir::read_entry_counter(std::size_t index) const {
  char buffer[kMaxAttributeSize + 1];
  const auto raw = node_->read_listed(index, buffer);
  return counter_of(raw, buffer);
}

Read<std::string> SysfsDir::read_entry_text(std::size_t index) const {
  char buffer[kMaxAttributeSize + 1];
  const auto raw = node_->read_listed(index, buffer);
  return text_of(raw, buffer);
}

SysfsDir::Attribute::Attribute(std::shared_ptr<Node> node, std::string name,
                               std::optional<std::size_t> index)
    : node_(std::move(node)), name_(std::move(name)), index_(index) {}

SysfsDir::Attribute SysfsDir::attribute(std::string_view name) const {
  const auto& listing = entries();
  const auto found = std::lower_bound(listing.begin(), listing.end(), name);
  std::optional<std::size_t> index;
  if (found != listing.end() && *found == name) {
    index = static_cast<std::size_t>(found - listing.begin());
  }
  return Attribute(node_, std::string(name), index);
}

Read<std::string> SysfsDir::Attribute::read_text() const {
  if (!node_->exists()) return attribute_failure(node_->missing());
  char buffer[kMaxAttributeSize + 1];
  const auto raw = index_ ? node_->read_listed(*index_, buffer) : node_->read(name_, buffer);
  return text_of(raw, buffer);
}

std::optional<std::string> SysfsDir::Attribute::read_text(ErrorSink& errors) const {
  auto text = read_text();
  if (!text) {
    errors.record(text.error(), path());
    return std::nullopt;
  }
  return std::move(*text);
}

std::filesystem::path SysfsDir::Attribute::path() const {
  return node_->path / name_;
}

std::optional<std::uint64_t> SysfsDir::read_entry_counter(std::size_t index,
                                                          ErrorSink& errors) const {
  auto value = read_entry_counter(index);
  if (!value) {
    errors.record(value.error(), path() / entries()[index]);
    return std::nullopt;
  }
  return *value;
}

const std::vector<std::string>& SysfsDir::entries() const {
  return node_->entries();
}

std::shared_ptr<const void> SysfsDir::derived(const std::type_info& type,
                                              std::shared_ptr<const void> value) const {
  std::lock_guard lock(node_->mutex);
  const auto it = node_->derived.find(type);
  if (it != node_->derived.end()) return it->second;
  if (value) node_->derived.emplace(type, value);
  return value;
}

Read<std::string> SysfsDir::read_static_text(std::string_view name) const {
  if (auto text = node_->remembered(name)) return std::move(*text);
  auto text = read_text(name);
  if (text) node_->remember(name, *text);
  return text;
}

std::vector<std::string> SysfsDir::current_entries() const {
  return node_->names();
}

std::optional<std::string> SysfsDir::read_text(std::string_view name, ErrorSink& errors) const {
  auto text = read_text(name);
  if (!text) {
    errors.record(text.error(), path() / name);
    return std::nullopt;
  }
  return std::move(*text);
}

std::optional<std::uint64_t> SysfsDir::read_counter(std::string_view name,
                                                    ErrorSink& errors) const {
  auto value = read_counter(name);
  if (!value) {
    errors.record(value.error(), path() / name);
    return std::nullopt;
  }
  return *value;
}

Read<std::string> read_text(const std::filesystem::path& file) {
  return SysfsDir(file.parent_path()).read_text(file.filename().native());
}

Read<std::uint64_t> read_counter(const std::filesystem::path& file) {
  return SysfsDir(file.parent_path()).read_counter(file.filename().native());
}

}  // namespace ibprobe::collectors
