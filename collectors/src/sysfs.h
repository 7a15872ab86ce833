// Reading the kernel's sysfs attribute files: one small text value per file, where the read
// itself can fail with an errno chosen by the driver.
//
// A scrape reads about a thousand attributes in a few dozen directories, again and again. Opening
// and closing each file every time was most of a scrape's cost, so a SysfsDir keeps what it opens:
// its subdirectories and the attribute files read through it stay open, up to a budget of half
// the soft RLIMIT_NOFILE (beyond it, opened by path for each read), and each read is one
// pread at offset 0 (sysfs regenerates an attribute's text on every read from offset 0). When the
// kernel unregisters a device its open files fail with ENODEV (ENOENT, ESTALE on some file
// systems): the read is then retried through a fresh open, and the tree marks itself stale so
// its owner opens it anew.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <expected>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "ibprobe/collectors.h"
#include "ibprobe/unique_fd.h"

namespace ibprobe::collectors {

// One attribute's value, or why it could not be had.
template <class T>
using Read = std::expected<T, ReadError>;

// A counter value as the kernel prints it ("%llu\n"); "N/A (no PMA)" and anything that is not
// a plain unsigned decimal fitting 64 bits are errors.
Read<std::uint64_t> parse_counter(std::string_view text);

struct DirectoryEntry {
  std::string name;
  ino_t inode;
};
// The entries of the open directory `fd` from its start, "." and ".." left out, in the order
// the file system gives them; an error (the directory was removed) ends the list.
std::vector<DirectoryEntry> read_directory(int fd);

// An open sysfs directory. A directory that could not be opened behaves as an empty one.
// Subdirectories got from a SysfsDir, and every file read through it, share one cache that
// lives as long as any SysfsDir of it; SysfsDir objects may be used from several threads.
class SysfsDir {
  struct Tree;
  struct Node;

 public:
  explicit SysfsDir(std::filesystem::path path);
  // `name` may have several components ("ports/1"); the result is cached in `parent`.
  SysfsDir(const SysfsDir& parent, std::string_view name);
  SysfsDir(SysfsDir&& other) noexcept = default;
  SysfsDir& operator=(SysfsDir&&) = delete;
  SysfsDir(const SysfsDir&) = delete;
  ~SysfsDir();

  bool is_open() const;
  const std::filesystem::path& path() const;
  // The directory's own descriptor: -1 when it could not be opened, or when the descriptor
  // budget (half the soft RLIMIT_NOFILE, for every descriptor the cache keeps) was spent and the
  // directory is reached by its path.
  int fd() const;

  // The file's content with surrounding white space removed.
  Read<std::string> read_text(std::string_view name) const;
  Read<std::uint64_t> read_counter(std::string_view name) const;
  // The same for an attribute the kernel fixes when it registers the device (node_type,
  // link_layer): read once and remembered for as long as this tree lives. A device that is
  // re-registered or replaced is a new tree; a failed read is not remembered.
  Read<std::string> read_static_text(std::string_view name) const;
  // Names in the directory, sorted; listed once and remembered: the attribute files of a
  // registered device do not change.
  const std::vector<std::string>& entries() const;
  // `make(entries())`, computed once and kept with the listing (the labels a collector derives
  // from the file names, say). One value per type T and directory.
  template <class T, class Make>
  const T& from_entries(Make make) const {
    auto kept = derived(typeid(T));
    if (!kept) kept = derived(typeid(T), std::make_shared<const T>(make(entries())));
    return *static_cast<const T*>(kept.get());
  }
  // The same, listed again on every call, for directories whose entries do change (device/net).
  std::vector<std::string> current_entries() const;
  // read_counter(entries()[index]) without looking the name up, for a collector that reads
  // every file of a listing; `index` is below entries().size().
  Read<std::uint64_t> read_entry_counter(std::size_t index) const;
  std::optional<std::uint64_t> read_entry_counter(std::size_t index, ErrorSink& errors) const;
  // read_text(entries()[index]), the same way.
  Read<std::string> read_entry_text(std::size_t index) const;

  // One attribute of this directory, looked up once by a collector that reads it on every
  // scrape (a port's state, rate, LID): once its file is open, a read through it is the pread
  // alone, with no lock and no look-up by name. Reads fail as read_text(name) would.
  class Attribute {
   public:
    Read<std::string> read_text() const;
    std::optional<std::string> read_text(ErrorSink& errors) const;
    std::filesystem::path path() const;

   private:
    friend class SysfsDir;
    Attribute(std::shared_ptr<Node> node, std::string name, std::optional<std::size_t> index);
    std::shared_ptr<Node> node_;
    std::string name_;
    std::optional<std::size_t> index_;  // in entries(); none for a name that is not listed
  };
  Attribute attribute(std::string_view name) const;

  // The same reads, reporting a failure to `errors` with the file's path.
  std::optional<std::string> read_text(std::string_view name, ErrorSink& errors) const;
  std::optional<std::uint64_t> read_counter(std::string_view name, ErrorSink& errors) const;

  // True once a read through this tree met a descriptor the kernel had invalidated.
  bool stale() const;

 private:
  // The value kept for `type`, or null; with `value`, keeps it unless one is kept already, and
  // returns the one kept.
  std::shared_ptr<const void> derived(const std::type_info& type,
                                      std::shared_ptr<const void> value = nullptr) const;
  std::shared_ptr<Node> node_;
};

// Whole-path conveniences for single reads.
Read<std::string> read_text(const std::filesystem::path& file);
Read<std::uint64_t> read_counter(const std::filesystem::path& file);

}  // namespace ibprobe::collectors
