// The TLS set-up of civetweb's SSL_CTX from the web config. It lives in the libssl stand-in
// (civetweb_ssl_compat.cpp), which HttpServer loads only for a server with TLS configured, so a
// plain-HTTP exporter maps neither libssl nor libcrypto; HttpServer finds it with dlsym.
#pragma once

#include <string>

#include "web_config.h"

// Certificate and key from separate files (civetweb alone wants them in one), protocol versions
// and client certificate policy: 1 when done, else -1 with the reason (OpenSSL's included) in
// `error`.
extern "C" int ibprobe_configure_tls_context(void* ssl_ctx,
                                             const ibprobe::exporter::TlsServerConfig& tls,
                                             std::string& error);

namespace ibprobe::exporter {
using ConfigureTlsContext = decltype(&ibprobe_configure_tls_context);
inline constexpr const char* kConfigureTlsContextSymbol = "ibprobe_configure_tls_context";
}  // namespace ibprobe::exporter
