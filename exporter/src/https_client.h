// The HTTPS half of post_json (http_post.h), in a library of its own, libibprobe_https_client.so,
// which the exporter loads the first time it sends to an https:// URL: OpenSSL is mapped only by
// an exporter whose configuration needs it (tests/e2e/crypto_loading_test.sh), as with the TLS
// server's libraries. A plain C interface, so the exporter needs no OpenSSL header to call it.
#pragma once

#include <cstddef>

extern "C" {

struct IbprobeHttpsExchange {
  // In: a connected socket (left open), the server's host name or address (its certificate must
  // name it, and names go out as SNI), the authorities to trust (null: the system's), and the
  // bound on the whole exchange.
  int fd;
  const char* host;
  const char* ca_file;
  int insecure_skip_verify;
  int timeout_ms;
  // In: the whole request. Out: the reply as read until the server closed the connection, at
  // most reply_capacity bytes.
  const char* request;
  std::size_t request_size;
  char* reply;
  std::size_t reply_capacity;
  std::size_t reply_size;
  // Out: why the exchange failed, when it returns nonzero.
  char error[512];
};

// Handshake, request and reply over TLS 1.2 or later; 0 on success.
int ibprobe_https_exchange(IbprobeHttpsExchange* exchange);
}

namespace ibprobe::exporter {
inline constexpr const char* kHttpsClientLibrary = "libibprobe_https_client.so";
inline constexpr const char* kHttpsExchangeSymbol = "ibprobe_https_exchange";
using HttpsExchangeFunction = int (*)(IbprobeHttpsExchange*);
}  // namespace ibprobe::exporter
