// The exporter's own shared libraries, loaded when a configuration needs them rather than linked:
// the TLS server's OpenSSL stand-ins and the HTTPS client. Installed next to the executable's
// ../lib/ibprobe, found in the build tree when run from there.
#pragma once

#include <expected>
#include <string>

namespace ibprobe::exporter {

// dlopen's handle of `name` from ../lib/ibprobe beside the executable, from beside it, or at
// `build_path`; else which paths were tried and why the last one failed.
std::expected<void*, std::string> load_exporter_library(const std::string& name,
                                                        const std::string& build_path,
                                                        int dlopen_flags);

}  // namespace ibprobe::exporter
