#include <civetweb.h>
#include <dlfcn.h>
#include <netdb.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "client_watch.h"
#include "exporter_libraries.h"
#include "ibprobe/exporter.h"
#include "ibprobe/host_port.h"
#include "ibprobe/unique_fd.h"
#include "tls_context.h"
#include "web_config.h"

namespace ibprobe::exporter {

// Response bodies up to this size are sent in one write with their headers.
constexpr std::size_t kCopiedBodyBytes = 256 * 1024;

namespace {

// Loads the stand-ins for the unversioned libcrypto.so and libssl.so civetweb opens for TLS
// (civetweb_ssl_compat.cpp, civetweb_crypto_compat.cpp) before civetweb opens them itself; the
// empty string when done, else why not. With them a host needs only the versioned runtime
// libraries (libssl3), not the -dev package that provides the unversioned names.
std::string load_civetweb_ssl_compat() {
  for (const auto& [name, build_path] :
       {std::pair{"libibprobe_civetweb_crypto.so", IBPROBE_CIVETWEB_CRYPTO_BUILD_PATH},
        std::pair{"libibprobe_civetweb_ssl.so", IBPROBE_CIVETWEB_SSL_BUILD_PATH}}) {
    if (auto loaded = load_exporter_library(name, build_path, RTLD_NOW | RTLD_GLOBAL); !loaded) {
      return loaded.error();
    }
  }
  return "";
}

// Connects to HOST:PORT and hangs up at once; nothing when it cannot.
void connect_once(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return;
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, ::freeaddrinfo);
  const UniqueFd fd(::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return;
  [[maybe_unused]] const int rc = ::connect(fd.get(), found->ai_addr, found->ai_addrlen);
}

// Where this host reaches a server listening on `listen_address`: the host itself, or loopback
// for the wildcard addresses.
std::string reachable_host(const std::string& listen_address) {
  const auto address = probes::parse_host_port(listen_address, probes::HostPortRules::listen());
  const std::string host = address ? address->host : "";
  if (host.empty() || host == "0.0.0.0") return "127.0.0.1";
  if (host == "::") return "::1";
  return host;
}

}  // namespace

struct HttpServer::Impl {
  const Routes& routes;
  mg_context* context = nullptr;
  std::optional<TlsServerConfig> tls;
  std::optional<Authenticator> auth;
  ConfigureTlsContext configure_tls = nullptr;  // from the TLS stand-in, when TLS is on
  std::string tls_error;                        // why init_ssl failed, for the constructor
  ClientWatch clients;
  // Handlers between the start of a request and the end of its answer: civetweb writes nothing
  // once it is stopping, so the destructor lets them finish first.
  std::atomic<int> answering = 0;
  std::mutex answering_mutex;
  std::condition_variable answered;
  std::string wake_host;  // where the destructor's connections wake civetweb's accept loop

  Impl(const Routes& r, const WebConfig& web) : routes(r), tls(web.tls) {
    if (web.auth_required()) auth.emplace(web);
  }

  // A 401 for a request without valid credentials. Nothing of what was sent is logged.
  static HttpResponse unauthorized(const Impl& impl, const mg_connection* connection) {
    HttpResponse response{401,
                          "text/plain; charset=utf-8",
                          "unauthorized\n",
                          {{"WWW-Authenticate", "Basic realm=\"ibprobe\""}}};
    if (impl.auth->offers_bearer()) {
      response.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"ibprobe\"");
    }
    // The body of a refused request is never read; the connection cannot be reused after it.
    if (mg_get_request_info(connection)->content_length > 0) {
      response.headers.emplace_back("Connection", "close");
    }
    return response;
  }

  // civetweb's SSL_CTX, set up by the TLS stand-in library (tls_context.h).
  static int init_ssl(void* ssl_ctx, void* self) {
    auto& impl = *static_cast<Impl*>(self);
    return impl.configure_tls(ssl_ctx, *impl.tls, impl.tls_error);
  }

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

  // Reads a request body of at most `limit` bytes; false when it is larger (or truncated).
  static bool read_body(mg_connection* connection, HttpRequest& request, std::size_t limit) {
    const long long length = mg_get_request_info(connection)->content_length;
    if (length <= 0) return true;
    if (static_cast<unsigned long long>(length) > limit) return false;
    request.body.resize(static_cast<std::size_t>(length));
    std::size_t got = 0;
    while (got < request.body.size()) {
      const int n = mg_read(connection, request.body.data() + got, request.body.size() - got);
      if (n <= 0) return false;
      got += static_cast<std::size_t>(n);
    }
    return true;
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
    if (request.method == "HEAD") {
      mg_write(connection, out.data(), out.size());
      return;
    }
    // A small body goes out with the headers in one write, so no segment of it waits for an
    // acknowledgement (Nagle). A large one (a whole fabric's page is megabytes) is written from
    // where it is: a copy would cost as much as the writing, in memcpy and fresh pages.
    if (response.body.size() <= kCopiedBodyBytes) {
      out += response.body;
      mg_write(connection, out.data(), out.size());
      return;
    }
    mg_write(connection, out.data(), out.size());
    mg_write(connection, response.body.data(), response.body.size());
  }

  static int handle(mg_connection* connection, void* self) {
    const auto start = std::chrono::steady_clock::now();
    auto& impl = *static_cast<Impl*>(self);
    struct Answering {
      Impl& impl;
      explicit Answering(Impl& i) : impl(i) { ++impl.answering; }
      ~Answering() {
        if (--impl.answering > 0) return;
        std::lock_guard lock(impl.answering_mutex);
        impl.answered.notify_all();
      }
    } answering(impl);
    HttpRequest request = to_request(connection);
    std::optional<ClientWatch::Watched> watched;
    request.watch_client = [&impl, &watched, connection] {
      if (!watched) {
        const mg_request_info* info = mg_get_request_info(connection);
        watched.emplace(impl.clients, find_connection_socket(info->server_port, info->remote_addr,
                                                             info->remote_port));
      }
      return watched->token();
    };
    HttpResponse response;
    try {
      const auto authorization = request.headers.find("authorization");
      if (impl.auth && !impl.auth->allowed(request.path, authorization == request.headers.end()
                                                             ? nullptr
                                                             : &authorization->second)) {
        response = unauthorized(impl, connection);
        impl.routes.count_refused(Routes::Refusal::kUnauthorized);
      } else if (const auto limit = Routes::max_body_bytes(request.path);
                 !read_body(connection, request, limit)) {
        response = HttpResponse{413,
                                "text/plain; charset=utf-8",
                                "request body larger than " + std::to_string(limit) +
                                    " bytes, or shorter than its Content-Length\n",
                                {{"Connection", "close"}}};
        impl.routes.count_refused(Routes::Refusal::kBodyTooLarge);
      } else {
        response = impl.routes.handle(request);
      }
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
    : HttpServer(listen_address, threads, routes, WebConfig{}) {}

HttpServer::HttpServer(const std::string& listen_address, int threads, const Routes& routes,
                       const WebConfig& web)
    : impl_(std::make_unique<Impl>(routes, web)) {
  impl_->wake_host = reachable_host(listen_address);
  static const unsigned kLibraryInit = mg_init_library(MG_FEATURES_IPV6);
  (void)kLibraryInit;
  if (web.tls) {
    // civetweb loads libssl and libcrypto at run time, once asked to; its return value is 0
    // even on success, so a failure shows when the server starts.
    static const std::string kCompatError = load_civetweb_ssl_compat();
    if (!kCompatError.empty()) throw std::runtime_error("cannot serve HTTPS: " + kCompatError);
    impl_->configure_tls =
        reinterpret_cast<ConfigureTlsContext>(dlsym(RTLD_DEFAULT, kConfigureTlsContextSymbol));
    if (!impl_->configure_tls) {
      throw std::runtime_error(std::string("cannot serve HTTPS: the TLS stand-in lacks ") +
                               kConfigureTlsContextSymbol);
    }
    static const unsigned kTlsInit = mg_init_library(MG_FEATURES_IPV6 | MG_FEATURES_TLS);
    (void)kTlsInit;
  }
  // spdlog creates its registry on first use; do that here, before the worker threads exist.
  spdlog::default_logger_raw();
  const std::string ports = civetweb_listening_port(listen_address) + (web.tls ? "s" : "");
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
  if (web.tls) callbacks.init_ssl = &Impl::init_ssl;
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
    throw std::runtime_error("cannot serve HTTP" + std::string(web.tls ? "S" : "") + " on " +
                             listen_address + ": " +
                             (impl_->tls_error.empty() ? error_text : impl_->tls_error));
  }
  mg_set_request_handler(impl_->context, "/", &Impl::handle, impl_.get());
  // Authorization is the exporter's own (web config, in handle()). Without a handler of its own
  // for it, civetweb looks for a password file, /.htpasswd, on every request: one more path
  // look-up per scrape, and a stray file of that name on the host would answer every request
  // 401 whatever the exporter's configuration says.
  mg_set_auth_handler(
      impl_->context, "/", [](mg_connection*, void*) { return 1; }, nullptr);
}

int HttpServer::port() const {
  mg_server_port ports[4];
  const int count = mg_get_server_ports(impl_->context, 4, ports);
  return count > 0 ? ports[0].port : 0;
}

HttpServer::~HttpServer() {
  // Waiting handlers answer at once, so the workers are free when civetweb joins them.
  impl_->clients.stop_all();
  if (!impl_->context) return;
  {
    // Bounded: a stopped waiting handler answers at once.
    constexpr auto kAnswerBound = std::chrono::seconds(5);
    std::unique_lock lock(impl_->answering_mutex);
    impl_->answered.wait_for(lock, kAnswerBound, [this] { return impl_->answering == 0; });
  }
  // civetweb's accept loop looks at its stop flag only between polls of its listening sockets,
  // 2 s each: a connection to them ends the poll, so stopping takes milliseconds, not seconds.
  std::atomic<bool> stopped = false;
  std::thread wake([this, &stopped, port = port()] {
    while (!stopped) {
      connect_once(impl_->wake_host, port);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  mg_stop(impl_->context);
  stopped = true;
  wake.join();
}

}  // namespace ibprobe::exporter
