// The exporter's one outgoing HTTP request: a JSON POST to a plain-HTTP URL, bounded by a
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
};

// "http://HOST[:PORT][/PATH]" (HOST a name, an IPv4 address or [IPv6]); https is refused with the
// reason, since the exporter carries no TLS client.
std::expected<HttpUrl, std::string> parse_http_url(const std::string& url);

struct HttpReply {
  int status = 0;
  std::string body;  // at most the first 64 KiB
};

// POSTs `json` to `url`'s path (Connection: close) and reads the reply, all by `deadline`. An
// error names what failed: resolving, connecting, sending, a reply that is not HTTP, the deadline.
// `headers`: more request headers ("Name: value" lines without the line end).
std::expected<HttpReply, std::string> post_json(const HttpUrl& url, const std::string& json,
                                                std::chrono::steady_clock::time_point deadline,
                                                const std::vector<std::string>& headers = {});

}  // namespace ibprobe::exporter
