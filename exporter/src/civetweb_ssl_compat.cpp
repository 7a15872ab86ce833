// A stand-in for libssl.so, for civetweb 1.15 as Debian 12 ships it. civetweb loads the TLS
// library at run time with dlopen("libssl.so") and looks up SSL_get_peer_certificate, which
// OpenSSL 3 no longer exports (it became a macro for SSL_get1_peer_certificate); civetweb then
// calls the missing function, a null pointer, on every TLS connection (civetweb issue #1334).
// This library carries the soname libssl.so and depends on the real libssl, so once HttpServer
// has loaded it, civetweb's dlopen finds it, and its lookups find this one function here and
// every other in the real libssl.
#include <openssl/ssl.h>

#undef SSL_get_peer_certificate

extern "C" __attribute__((visibility("default"))) X509* SSL_get_peer_certificate(const SSL* ssl) {
  // get1 is what the old name meant: the caller owns a reference (civetweb frees it).
  return SSL_get1_peer_certificate(ssl);
}
