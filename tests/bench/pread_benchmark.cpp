// What one scrape's attribute reads cost the kernel, and whether io_uring batching them beats one
// pread each. Opens every regular file under the given directories once (as the exporter keeps
// them open), then re-reads all of them from offset 0 per round, three ways in turn:
//   pread        one pread(2) per file, as the exporter does
//   uring        one io_uring submission of IORING_OP_READ for every file, one io_uring_enter
//   uring-fixed  the same with registered files and a registered buffer (READ_FIXED)
// and prints per round: CPU (utime + stime of the whole process, io-wq worker threads included:
// files that cannot be read without blocking, such as sysfs attributes, are handed to them),
// p50 and p99 latency, system calls, and the largest number of threads seen meanwhile.
// Usage: ibprobe_pread_benchmark [--rounds N] [--blocks B] [--copies K] DIR...
//   B blocks of N rounds of each mode in turn (defaults 10 x 200); CPU is the median block's.
//   --copies opens each file K times (a small real sysfs directory stands for a scrape's 880).
#include <fcntl.h>
#include <liburing.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr std::size_t kBufferSize = 4096;

double process_cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

int thread_count() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with("Threads:")) return std::atoi(line.c_str() + 8);
  }
  return 0;
}

class Files {
 public:
  Files(const std::vector<std::string>& dirs, int copies) {
    for (const auto& dir : dirs) {
      std::error_code ec;
      for (auto it = std::filesystem::recursive_directory_iterator(
               dir, std::filesystem::directory_options::skip_permission_denied, ec);
           !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
        if (!it->is_regular_file(ec) || it->is_symlink(ec)) continue;
        for (int c = 0; c < copies; ++c) {
          const int fd = ::open(it->path().c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
          if (fd < 0) continue;
          char probe[kBufferSize];
          // Only what reads as an attribute does: write-only and failing files are left out.
          if (::pread(fd, probe, sizeof probe, 0) < 0) {
            ::close(fd);
            break;
          }
          fds.push_back(fd);
        }
      }
    }
    buffers.resize(fds.size() * kBufferSize);
  }
  ~Files() {
    for (int fd : fds) ::close(fd);
  }
  Files(const Files&) = delete;
  Files& operator=(const Files&) = delete;
  std::vector<int> fds;
  std::vector<char> buffers;
};

struct Mode {
  std::string name;
  std::function<std::size_t()> round;
  int syscalls_per_round;
  std::vector<double> cpu_us;     // per block
  std::vector<double> latencies;  // every round
  int max_threads = 0;
  std::size_t bytes = 0;
};

void measure_block(Mode& mode, int rounds) {
  const double cpu_before = process_cpu_seconds();
  for (int i = 0; i < rounds; ++i) {
    const auto start = std::chrono::steady_clock::now();
    mode.bytes = mode.round();
    mode.latencies.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
    if (i % 50 == 0) mode.max_threads = std::max(mode.max_threads, thread_count());
  }
  mode.cpu_us.push_back((process_cpu_seconds() - cpu_before) / rounds * 1e6);
}

double at(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<std::size_t>(values.size() * q))];
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 200;
  int blocks = 10;
  int copies = 1;
  std::vector<std::string> dirs;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (arg == "--blocks" && i + 1 < argc) {
      blocks = std::atoi(argv[++i]);
    } else if (arg == "--copies" && i + 1 < argc) {
      copies = std::atoi(argv[++i]);
    } else {
      dirs.emplace_back(arg);
    }
  }
  if (dirs.empty() || rounds <= 0 || blocks <= 0 || copies <= 0) {
    std::fprintf(stderr, "usage: %s [--rounds N] [--blocks B] [--copies K] DIR...\n", argv[0]);
    return 2;
  }
  Files files(dirs, copies);
  const auto count = static_cast<unsigned>(files.fds.size());
  if (count == 0) {
    std::fprintf(stderr, "no readable files\n");
    return 1;
  }

  auto pread_round = [&] {
    std::size_t bytes = 0;
    for (unsigned i = 0; i < count; ++i) {
      const ssize_t n = ::pread(files.fds[i], &files.buffers[i * kBufferSize], kBufferSize, 0);
      if (n > 0) bytes += static_cast<std::size_t>(n);
    }
    return bytes;
  };

  io_uring ring{};
  unsigned entries = 1;
  while (entries < count) entries <<= 1;
  if (int rc = io_uring_queue_init(entries, &ring, 0); rc < 0) {
    std::fprintf(stderr, "io_uring_queue_init: %s\n", std::strerror(-rc));
    return 1;
  }
  auto uring_round = [&](bool fixed) {
    for (unsigned i = 0; i < count; ++i) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      char* buffer = &files.buffers[i * kBufferSize];
      if (fixed) {
        io_uring_prep_read_fixed(sqe, static_cast<int>(i), buffer, kBufferSize, 0, 0);
        sqe->flags |= IOSQE_FIXED_FILE;
      } else {
        io_uring_prep_read(sqe, files.fds[i], buffer, kBufferSize, 0);
      }
    }
    io_uring_submit_and_wait(&ring, count);
    std::size_t bytes = 0;
    unsigned head = 0;
    unsigned seen = 0;
    io_uring_cqe* cqe = nullptr;
    io_uring_for_each_cqe(&ring, head, cqe) {
      if (cqe->res > 0) bytes += static_cast<std::size_t>(cqe->res);
      ++seen;
    }
    io_uring_cq_advance(&ring, seen);
    // A submission larger than the completion queue holds finishes in more than one wait.
    while (seen < count) {
      io_uring_wait_cqe(&ring, &cqe);
      if (cqe->res > 0) bytes += static_cast<std::size_t>(cqe->res);
      io_uring_cqe_seen(&ring, cqe);
      ++seen;
    }
    return bytes;
  };

  std::vector<Mode> modes;
  modes.push_back({"pread", pread_round, static_cast<int>(count), {}, {}});
  modes.push_back({"uring", [&] { return uring_round(false); }, 1, {}, {}});
  iovec buffer{files.buffers.data(), files.buffers.size()};
  if (io_uring_register_files(&ring, files.fds.data(), count) == 0 &&
      io_uring_register_buffers(&ring, &buffer, 1) == 0) {
    modes.push_back({"uring-fixed", [&] { return uring_round(true); }, 1, {}, {}});
  }
  for (auto& mode : modes) {
    for (int i = 0; i < 20; ++i) mode.round();  // warm-up (starts io-wq workers, if any)
  }
  // Blocks of each mode in turn, so that all of them see the same machine.
  for (int block = 0; block < blocks; ++block) {
    for (auto& mode : modes) measure_block(mode, rounds);
  }
  io_uring_queue_exit(&ring);

  std::printf("%u open files; %d blocks of %d rounds per mode, in turn\n", count, blocks, rounds);
  std::printf("%-12s%9s%15s%12s%9s%9s%10s%9s%8s\n", "mode", "CPU us", "(range)", "ns per file",
              "p50 us", "p99 us", "syscalls", "threads", "bytes");
  const double pread_cpu = at(modes.front().cpu_us, 0.5);
  for (const auto& m : modes) {
    const double cpu = at(m.cpu_us, 0.5);
    char range[32];
    std::snprintf(range, sizeof range, "(%.0f-%.0f)", at(m.cpu_us, 0), at(m.cpu_us, 1));
    std::printf("%-12s%9.0f%15s%12.0f%9.0f%9.0f%10d%9d%8zu   CPU x%.2f of pread\n", m.name.c_str(),
                cpu, range, cpu * 1000 / count, at(m.latencies, 0.5), at(m.latencies, 0.99),
                m.syscalls_per_round, m.max_threads, m.bytes, cpu / pread_cpu);
  }
  return 0;
}
