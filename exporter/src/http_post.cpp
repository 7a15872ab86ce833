#include "http_post.h"

#include <dlfcn.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "exporter_libraries.h"
#include "https_client.h"
#include "ibprobe/unique_fd.h"

namespace ibprobe::exporter {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kMaxReplyBytes = 64 * 1024;

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<std::chrono::milliseconds::rep>(left.count(), 0));
}

// Waits until `fd` is ready for `events` or the deadline passes.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  pollfd p{fd, events, 0};
  while (true) {
    const int n = ::poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return true;
    if (n == 0 || errno != EINTR) return false;
  }
}

std::expected<UniqueFd, std::string> connect_to(const HttpUrl& url, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(url.host.c_str(), url.port.c_str(), &hints, &found); rc != 0) {
    return std::unexpected("cannot resolve " + url.host + ": " + ::gai_strerror(rc));
  }
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, ::freeaddrinfo);
  std::string last_error = "no address";
  for (const addrinfo* a = addresses.get(); a; a = a->ai_next) {
    UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) {
      last_error = std::strerror(errno);
      continue;
    }
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) return fd;
    if (errno != EINPROGRESS) {
      last_error = std::strerror(errno);
      continue;
    }
    if (!wait_for(fd.get(), POLLOUT, deadline)) return std::unexpected("connecting timed out");
    int error = 0;
    socklen_t length = sizeof(error);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length);
    if (error == 0) return fd;
    last_error = std::strerror(error);
  }
  return std::unexpected("cannot connect to " + url.host + ":" + url.port + ": " + last_error);
}

// "HTTP/1.1 200 OK\r\n...": the status and the body.
std::expected<HttpReply, std::string> parse_reply(const std::string& raw) {
  if (!raw.starts_with("HTTP/1.") || raw.size() < 12 || raw[8] != ' ') {
    return std::unexpected("the reply is not HTTP: '" + raw.substr(0, 40) + "'");
  }
  HttpReply reply;
  reply.status = std::atoi(raw.c_str() + 9);
  if (const auto end = raw.find("\r\n\r\n"); end != std::string::npos)
    reply.body = raw.substr(end + 4);
  return reply;
}

// The HTTPS client library's exchange function, loaded once, or why it cannot be.
const std::expected<HttpsExchangeFunction, std::string>& https_exchange() {
  static const auto function = []() -> std::expected<HttpsExchangeFunction, std::string> {
    const auto library =
        load_exporter_library(kHttpsClientLibrary, IBPROBE_HTTPS_CLIENT_BUILD_PATH, RTLD_NOW);
    if (!library) return std::unexpected(library.error());
    void* symbol = dlsym(*library, kHttpsExchangeSymbol);
    if (!symbol) return std::unexpected(std::string(kHttpsClientLibrary) + " has no exchange");
    return reinterpret_cast<HttpsExchangeFunction>(symbol);
  }();
  return function;
}

}  // namespace

std::expected<HttpUrl, std::string> parse_http_url(const std::string& url) {
  HttpUrl out;
  std::string_view rest;
  if (url.starts_with("https://")) {
    out.https = true;
    out.port = "443";
    rest = std::string_view(url).substr(8);
  } else if (url.starts_with("http://")) {
    rest = std::string_view(url).substr(7);
  } else {
    return std::unexpected("'" + url + "' is not an http:// or https:// URL");
  }
  const auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) out.path = std::string(rest.substr(slash));
  if (authority.starts_with('[')) {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return std::unexpected("'" + url + "': unclosed [");
    out.host = std::string(authority.substr(1, close - 1));
    authority.remove_prefix(close + 1);
    if (!authority.empty()) {
      if (authority.front() != ':') return std::unexpected("'" + url + "': text after ]");
      out.port = std::string(authority.substr(1));
    }
  } else if (const auto colon = authority.rfind(':'); colon != std::string_view::npos) {
    out.host = std::string(authority.substr(0, colon));
    out.port = std::string(authority.substr(colon + 1));
  } else {
    out.host = std::string(authority);
  }
  if (out.host.empty()) return std::unexpected("'" + url + "' names no host");
  if (out.port.empty() || out.port.size() > 5 ||
      !std::ranges::all_of(out.port, [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoi(out.port) == 0 || std::stoi(out.port) > 65535) {
    return std::unexpected("'" + url + "': port '" + out.port + "' is not 1..65535");
  }
  return out;
}

std::expected<HttpReply, std::string> post_json(const HttpUrl& url, const std::string& json,
                                                Clock::time_point deadline,
                                                const std::vector<std::string>& headers,
                                                const TlsClientOptions& tls) {
  if (url.https && !https_exchange()) return std::unexpected(https_exchange().error());
  auto fd = connect_to(url, deadline);
  if (!fd) return std::unexpected(fd.error());
  const bool v6 = url.host.find(':') != std::string::npos;
  std::string request =
      "POST " + url.path + " HTTP/1.1\r\nHost: " + (v6 ? "[" + url.host + "]" : url.host) + ":" +
      url.port +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(json.size()) +
      "\r\nConnection: close\r\n";
  for (const auto& header : headers) request += header + "\r\n";
  request += "\r\n" + json;
  std::string raw;
  if (url.https) {
    IbprobeHttpsExchange exchange{};
    exchange.fd = fd->get();
    exchange.host = url.host.c_str();
    exchange.ca_file = tls.ca_file.c_str();
    exchange.insecure_skip_verify = tls.insecure_skip_verify ? 1 : 0;
    exchange.timeout_ms = remaining_ms(deadline);
    exchange.request = request.data();
    exchange.request_size = request.size();
    raw.resize(kMaxReplyBytes);
    exchange.reply = raw.data();
    exchange.reply_capacity = raw.size();
    if ((**https_exchange())(&exchange) != 0) return std::unexpected(std::string(exchange.error));
    raw.resize(exchange.reply_size);
    return parse_reply(raw);
  }
  for (std::size_t sent = 0; sent < request.size();) {
    if (!wait_for(fd->get(), POLLOUT, deadline)) return std::unexpected("sending timed out");
    const auto n = ::send(fd->get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return std::unexpected(std::string("sending failed: ") + std::strerror(errno));
    }
    if (n > 0) sent += static_cast<std::size_t>(n);
  }
  char buffer[4096];
  while (raw.size() < kMaxReplyBytes) {
    if (!wait_for(fd->get(), POLLIN, deadline)) return std::unexpected("the reply timed out");
    const auto n = ::recv(fd->get(), buffer, sizeof(buffer), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return std::unexpected(std::string("reading the reply failed: ") + std::strerror(errno));
    }
    raw.append(buffer, static_cast<std::size_t>(n));
  }
  return parse_reply(raw);
}

}  // namespace ibprobe::exporter
