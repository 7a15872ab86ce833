// The exporter's one outgoing HTTP request: a JSON POST over HTTP or HTTPS, bounded by a
// deadline, for what the alert receiver sends on (its verdicts to Alertmanager's API, alerts to
// the exporter of the host they are about).
#pragma once

#include <chrono>
#include <expected>
#include <string>
#include <vector>

namespace ibprobe::exporter {

struct HttpUrl {
  std::string host;
  std::string port = "80";
  std::string path = "/";
  bool https = false;
};

// How an HTTPS server's certificate is checked: against the authorities of `ca_file` (PEM), or
// the system's when it is empty, and for the URL's host name or address; or not at all.
struct TlsClientOptions {
  std::string ca_file = {};
  bool insecure_skip_verify = false;
};

// "http[s]://HOST[:PORT][/PATH]" (HOST a name, an IPv4 address or [IPv6]; port 80 or 443 when
// left out).
std::expected<HttpUrl, std::string> parse_http_url(const std::string& url);

struct HttpReply {
  int status = 0;
  std::string body;  // at most the first 64 KiB
};

// POSTs `json` to `url`'s path (Connection: close) and reads the reply, all by `deadline`. An
// error names what failed: resolving, connecting, the TLS handshake (e.g. a certificate that does
// not verify, in OpenSSL's words), sending, a reply that is not HTTP, the deadline.
// `headers`: more request headers ("Name: value" lines without the line end); `tls`: how an https
// URL's server is checked (the HTTPS client library is loaded on the first https request).
std::expected<HttpReply, std::string> post_json(const HttpUrl& url, const std::string& json,
                                                std::chrono::steady_clock::time_point deadline,
                                                const std::vector<std::string>& headers = {},
                                                const TlsClientOptions& tls = {});

}  // namespace ibprobe::exporter
