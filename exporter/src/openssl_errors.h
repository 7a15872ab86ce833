// OpenSSL's error queue in words, for the exporter's two TLS libraries (the server's stand-in and
// the HTTPS client), each a shared object of its own.
#pragma once

#include <openssl/err.h>

#include <string>

namespace ibprobe::exporter {

// Drains the calling thread's error queue: its reasons joined by "; ".
inline std::string openssl_errors() {
  std::string text;
  while (const unsigned long code = ERR_get_error()) {
    char line[256];
    ERR_error_string_n(code, line, sizeof(line));
    text += (text.empty() ? "" : "; ") + std::string(line);
  }
  return text.empty() ? "no detail from OpenSSL" : text;
}

}  // namespace ibprobe::exporter
