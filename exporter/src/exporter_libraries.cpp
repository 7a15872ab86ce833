#include "exporter_libraries.h"

#include <dlfcn.h>

#include <filesystem>

namespace ibprobe::exporter {

std::expected<void*, std::string> load_exporter_library(const std::string& name,
                                                        const std::string& build_path,
                                                        int dlopen_flags) {
  std::error_code ec;
  const auto exe_dir = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path();
  std::string tried, last_error;
  for (const std::filesystem::path& path : {exe_dir / ".." / "lib" / "ibprobe" / name,
                                            exe_dir / name, std::filesystem::path(build_path)}) {
    if (void* handle = dlopen(path.c_str(), dlopen_flags)) return handle;
    const char* why = dlerror();
    last_error = why ? why : "";
    tried += (tried.empty() ? "" : ", ") + path.string();
  }
  return std::unexpected("cannot load " + name + " (tried " + tried + "; " + last_error + ")");
}

}  // namespace ibprobe::exporter
