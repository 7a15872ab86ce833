// A stand-in for libssl.so, for civetweb 1.15 as Debian 12 ships it. civetweb loads the TLS
// library at run time with dlopen("libssl.so") and looks up SSL_get_peer_certificate, which
// OpenSSL 3 no longer exports (it became a macro for SSL_get1_peer_certificate); civetweb then
// calls the missing function, a null pointer, on every TLS connection (civetweb issue #1334).
// This library carries the soname libssl.so and depends on the real libssl, so once HttpServer
// has loaded it, civetweb's dlopen finds it, and its lookups find this one function here and
// every other in the real libssl. It also holds the SSL_CTX set-up (tls_context.h): everything
// of the exporter that calls OpenSSL for TLS is loaded with it, when TLS is configured.
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "openssl_errors.h"
#include "tls_context.h"

#undef SSL_get_peer_certificate

extern "C" __attribute__((visibility("default"))) X509* SSL_get_peer_certificate(const SSL* ssl) {
  // get1 is what the old name meant: the caller owns a reference (civetweb frees it).
  return SSL_get1_peer_certificate(ssl);
}

namespace {

using ibprobe::exporter::ClientAuth;
using ibprobe::exporter::openssl_errors;

int tls_version(const std::string& name) {
  if (name == "TLS10") return TLS1_VERSION;
  if (name == "TLS11") return TLS1_1_VERSION;
  if (name == "TLS12") return TLS1_2_VERSION;
  return TLS1_3_VERSION;
}

// Client certificates that are asked for but not verified (exporter-toolkit's
// RequestClientCert and RequireAnyClientCert) pass whatever their chain.
int accept_any_certificate(int, X509_STORE_CTX*) {
  return 1;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int ibprobe_configure_tls_context(
    void* ssl_ctx, const ibprobe::exporter::TlsServerConfig& tls, std::string& error) {
  auto* ctx = static_cast<SSL_CTX*>(ssl_ctx);
  auto failed = [&](const std::string& what) {
    error = what + ": " + openssl_errors();
    return -1;
  };
  if (SSL_CTX_use_certificate_chain_file(ctx, tls.cert_file.c_str()) != 1) {
    return failed("cannot load cert_file " + tls.cert_file.string());
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, tls.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    return failed("cannot load key_file " + tls.key_file.string());
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    return failed("key_file " + tls.key_file.string() + " does not match cert_file");
  }
  if (SSL_CTX_set_min_proto_version(ctx, tls_version(tls.min_version)) != 1 ||
      SSL_CTX_set_max_proto_version(ctx, tls_version(tls.max_version)) != 1) {
    return failed("cannot set the TLS versions");
  }
  // Session resumption with client certificates needs a session id context.
  static constexpr unsigned char kSessionContext[] = "ibprobe";
  SSL_CTX_set_session_id_context(ctx, kSessionContext, sizeof(kSessionContext) - 1);
  if (!tls.client_ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, tls.client_ca_file.c_str(), nullptr) != 1) {
      return failed("cannot load client_ca_file " + tls.client_ca_file.string());
    }
    if (auto* names = SSL_load_client_CA_file(tls.client_ca_file.c_str())) {
      SSL_CTX_set_client_CA_list(ctx, names);
    }
  }
  switch (tls.client_auth) {
    case ClientAuth::kNoClientCert:
      SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
      break;
    case ClientAuth::kRequestClientCert:
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, &accept_any_certificate);
      break;
    case ClientAuth::kRequireAnyClientCert:
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                         &accept_any_certificate);
      break;
    case ClientAuth::kVerifyClientCertIfGiven:
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
      break;
    case ClientAuth::kRequireAndVerifyClientCert:
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
      break;
  }
  return 1;
}
