// A minimal blocking HTTP/1.1 client for talking to the exporter's real socket in tests.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

namespace ibprobe::testing {

struct RawResponse {
  int status = 0;
  std::string head;
  std::string body;
};

inline RawResponse http_request(int port, const std::string& request_text) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    throw std::runtime_error("connect failed");
  }
  std::size_t sent = 0;
  while (sent < request_text.size()) {
    const auto n = ::send(fd, request_text.data() + sent, request_text.size() - sent, 0);
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
  std::string raw;
  char buffer[65536];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0;) raw.append(buffer, n);
  ::close(fd);
  RawResponse response;
  const auto split = raw.find("\r\n\r\n");
  response.head = raw.substr(0, split);
  response.body = split == std::string::npos ? "" : raw.substr(split + 4);
  if (raw.starts_with("HTTP/1.1 ")) response.status = std::stoi(raw.substr(9, 3));
  return response;
}

inline RawResponse http_get(int port, const std::string& path) {
  return http_request(port,
                      "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
}

}  // namespace ibprobe::testing
