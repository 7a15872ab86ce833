#include "https_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "openssl_errors.h"

namespace {

using Clock = std::chrono::steady_clock;
using ibprobe::exporter::openssl_errors;

class TlsSession {
 public:
  TlsSession(int fd, Clock::time_point deadline) : fd_(fd), deadline_(deadline) {}

  bool handshake(const IbprobeHttpsExchange& exchange) {
    context_.reset(SSL_CTX_new(TLS_client_method()));
    if (!context_) return fail("TLS: " + openssl_errors());
    SSL_CTX_set_min_proto_version(context_.get(), TLS1_2_VERSION);
    const std::string host = exchange.host;
    if (!exchange.insecure_skip_verify) {
      const int loaded =
          exchange.ca_file && *exchange.ca_file
              ? SSL_CTX_load_verify_locations(context_.get(), exchange.ca_file, nullptr)
              : SSL_CTX_set_default_verify_paths(context_.get());
      if (loaded != 1) {
        return fail("TLS: cannot load the authorities" +
                    (exchange.ca_file && *exchange.ca_file ? " of " + std::string(exchange.ca_file)
                                                           : std::string()) +
                    ": " + openssl_errors());
      }
      SSL_CTX_set_verify(context_.get(), SSL_VERIFY_PEER, nullptr);
    }
    ssl_.reset(SSL_new(context_.get()));
    if (!ssl_ || SSL_set_fd(ssl_.get(), fd_) != 1) return fail("TLS: " + openssl_errors());
    in6_addr address6{};
    in_addr address4{};
    const bool literal = ::inet_pton(AF_INET, host.c_str(), &address4) == 1 ||
                         ::inet_pton(AF_INET6, host.c_str(), &address6) == 1;
    // SNI carries names only; the certificate must name the host or the address asked for.
    if (!literal) SSL_set_tlsext_host_name(ssl_.get(), host.c_str());
    if (!exchange.insecure_skip_verify) {
      X509_VERIFY_PARAM* param = SSL_get0_param(ssl_.get());
      const int set = literal ? X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str())
                              : X509_VERIFY_PARAM_set1_host(param, host.c_str(), 0);
      if (set != 1) return fail("TLS: " + openssl_errors());
    }
    while (true) {
      const int rc = SSL_connect(ssl_.get());
      if (rc == 1) return true;
      if (!await(rc)) {
        const auto verified = SSL_get_verify_result(ssl_.get());
        return fail(
            "TLS handshake with " + host + " failed: " +
            (verified != X509_V_OK ? std::string(X509_verify_cert_error_string(verified)) : why_));
      }
    }
  }

  bool write_all(const char* data, std::size_t size) {
    for (std::size_t sent = 0; sent < size;) {
      const int n = SSL_write(ssl_.get(), data + sent, static_cast<int>(size - sent));
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
      } else if (!await(n)) {
        return fail("sending failed: " + why_);
      }
    }
    return true;
  }

  // Until the server closes (the request said Connection: close) or `capacity` is reached.
  bool read_all(char* out, std::size_t capacity, std::size_t& size) {
    size = 0;
    while (size < capacity) {
      const int n = SSL_read(ssl_.get(), out + size, static_cast<int>(capacity - size));
      if (n > 0) {
        size += static_cast<std::size_t>(n);
        continue;
      }
      const int error = SSL_get_error(ssl_.get(), n);
      // A server that closes without close_notify after Connection: close ends the reply too.
      if (error == SSL_ERROR_ZERO_RETURN || (error == SSL_ERROR_SYSCALL && ERR_peek_error() == 0))
        return true;
      if (!await(n)) return fail("reading the reply failed: " + why_);
    }
    return true;
  }

  const std::string& error() const { return why_; }

 private:
  bool fail(std::string why) {
    why_ = std::move(why);
    return false;
  }

  // After an SSL call returned `rc`: waits for what it wants and says to call again, or keeps
  // the reason and says no.
  bool await(int rc) {
    const int error = SSL_get_error(ssl_.get(), rc);
    short events = 0;
    if (error == SSL_ERROR_WANT_READ) events = POLLIN;
    if (error == SSL_ERROR_WANT_WRITE) events = POLLOUT;
    if (events == 0) {
      why_ = openssl_errors();
      return false;
    }
    pollfd p{fd_, events, 0};
    while (true) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
      const int n = ::poll(&p, 1, static_cast<int>(std::max<long long>(left, 0)));
      if (n > 0) return true;
      if (n == 0 || errno != EINTR) {
        why_ = "timed out";
        return false;
      }
    }
  }

  int fd_;
  Clock::time_point deadline_;
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> context_{nullptr, SSL_CTX_free};
  // After the context, so it is freed first.
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl_{nullptr, SSL_free};
  std::string why_;
};

}  // namespace

extern "C" int ibprobe_https_exchange(IbprobeHttpsExchange* exchange) {
  TlsSession session(exchange->fd,
                     Clock::now() + std::chrono::milliseconds(std::max(exchange->timeout_ms, 0)));
  if (session.handshake(*exchange) &&
      session.write_all(exchange->request, exchange->request_size) &&
      session.read_all(exchange->reply, exchange->reply_capacity, exchange->reply_size)) {
    return 0;
  }
  std::snprintf(exchange->error, sizeof(exchange->error), "%s", session.error().c_str());
  return -1;
}
