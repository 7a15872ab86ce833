#include <civetweb.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "ibprobe/exporter.h"

namespace ibprobe::exporter {

struct HttpServer::Impl {
  const Routes& routes;
  mg_context* context = nullptr;

  explicit Impl(const Routes& r) : routes(r) {}

  static HttpRequest to_request(mg_connection* connection) {
    const mg_request_info* info = mg_get_request_info(connection);
    HttpRequest request;
    request.method = info->request_method ? info->request_method : "";
    request.path = info->local_uri ? info->local_uri : "";
    request.query = info->query_string ? info->query_string : "";
    for (int i = 0; i < info->num_headers; ++i) {
      std::string name = info->http_headers[i].name;
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      request.headers[name] = info->http_headers[i].value;
    }
    return request;
  }

  // Status line, headers and body leave in one write: split writes of a small response meet
  // Nagle's algorithm and the peer's delayed ACK, which costs tens of milliseconds.
  static void send(mg_connection* connection, const HttpRequest& request,
                   const HttpResponse& response) {
    std::string out = "HTTP/1.1 " + std::to_string(response.status) + " " +
                      mg_get_response_code_text(connection, response.status) +
                      "\r\nContent-Type: " + response.content_type +
                      "\r\nContent-Length: " + std::to_string(response.body.size()) + "\r\n";
    for (const auto& [name, value] : response.headers) out += name + ": " + value + "\r\n";
    out += "\r\n";
    if (request.method != "HEAD") out += response.body;
    mg_write(connection, out.data(), out.size());
  }

  static int handle(mg_connection* connection, void* self) {
    const auto start = std::chrono::steady_clock::now();
    auto& impl = *static_cast<Impl*>(self);
    const HttpRequest request = to_request(connection);
    HttpResponse response;
    try {
      response = impl.routes.handle(request);
    } catch (const std::exception& e) {
      spdlog::error("request {} {} failed: {}", request.method, request.path, e.what());
      response = HttpResponse{
          500, "text/plain; charset=utf-8", std::string("internal error: ") + e.what() + "\n", {}};
    }
    send(connection, request, response);
    const std::chrono::duration<double, std::milli> elapsed =
        std::chrono::steady_clock::now() - start;
    spdlog::debug("http method={} path={} status={} bytes={} duration_ms={:.3f}", request.method,
                  request.path, response.status, response.body.size(), elapsed.count());
    return response.status;
  }

  static int log_message(const mg_connection*, const char* message) {
    spdlog::warn("http server: {}", message);
    return 1;
  }
};

HttpServer::HttpServer(const std::string& listen_address, int threads, const Routes& routes)
    : impl_(std::make_unique<Impl>(routes)) {
  static const unsigned kLibraryInit = mg_init_library(MG_FEATURES_IPV6);
  (void)kLibraryInit;
  // spdlog creates its registry on first use; do that here, before the worker threads exist.
  spdlog::default_logger_raw();
  const std::string ports = civetweb_listening_port(listen_address);
  const std::string thread_count = std::to_string(threads);
  const char* options[] = {"listening_ports",
                           ports.c_str(),
                           "num_threads",
                           thread_count.c_str(),
                           "request_timeout_ms",
                           "30000",
                           "enable_keep_alive",
                           "yes",
                           nullptr};
  mg_callbacks callbacks{};
  callbacks.log_message = &Impl::log_message;
  mg_init_data init{};
  init.callbacks = &callbacks;
  init.user_data = impl_.get();
  init.configuration_options = options;
  mg_error_data error{};
  char error_text[256] = {};
  error.text = error_text;
  error.text_buffer_size = sizeof(error_text);
  impl_->context = mg_start2(&init, &error);
  if (!impl_->context) {
    throw std::runtime_error("cannot serve HTTP on " + listen_address + ": " + error_text);
  }
  mg_set_request_handler(impl_->context, "/", &Impl::handle, impl_.get());
}

int HttpServer::port() const {
  mg_server_port ports[4];
  const int count = mg_get_server_ports(impl_->context, 4, ports);
  return count > 0 ? ports[0].port : 0;
}

HttpServer::~HttpServer() {
  if (impl_->context) mg_stop(impl_->context);
}

}  // namespace ibprobe::exporter
