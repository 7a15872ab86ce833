// TLS and authentication of the exporter's HTTP server, over real sockets: a real TLS handshake
// with certificates made here by the openssl command, and credentials checked by the server.
#include <arpa/inet.h>
#include <crypt.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "collect_helpers.h"
#include "http_client.h"
#include "http_post.h"
#include "ibprobe/exporter.h"
#include "sysfs_fixture.h"
#include "web_config.h"

namespace ibprobe::testing {
namespace {

using exporter::WebConfig;

std::string bcrypt(const std::string& secret) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  if (!crypt_gensalt_rn("$2y$", 4, nullptr, 0, salt, sizeof(salt))) {
    throw std::runtime_error("crypt_gensalt_rn failed");
  }
  crypt_data data{};
  return crypt_r(secret.c_str(), salt, &data);
}

std::string base64(const std::string& text) {
  std::string out(4 * ((text.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

RawResponse get_with(int port, const std::string& path, const std::string& authorization) {
  return http_request(port, "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nAuthorization: " +
                                authorization + "\r\nConnection: close\r\n\r\n");
}

// An exporter with its real routes and a given web config.
class Exporter {
 public:
  explicit Exporter(const WebConfig& web) {
    tree_.add(mlx5_ib_device("mlx5_0", 1, 0));
    scraper_ = scraper_over(tree_.root());
    routes_ = std::make_unique<exporter::Routes>(config_, *scraper_);
    routes_->set_ready(true);
    server_ = std::make_unique<exporter::HttpServer>("127.0.0.1:0", 2, *routes_, web);
  }
  int port() const { return server_->port(); }

 private:
  SysfsTree tree_;
  exporter::Config config_;
  std::unique_ptr<collectors::Scraper> scraper_;
  std::unique_ptr<exporter::Routes> routes_;
  std::unique_ptr<exporter::HttpServer> server_;
};

bool is_metrics(const RawResponse& response) {
  return response.status == 200 && response.body.find("rdma_port_") != std::string::npos;
}

TEST(HttpBasicAuth, CredentialsAreRequiredAndChecked) {
  WebConfig web;
  web.basic_auth_users["prometheus"] = bcrypt("s3cret pass");
  const Exporter exporter(web);

  const auto none = http_get(exporter.port(), "/metrics");
  EXPECT_EQ(none.status, 401);
  EXPECT_NE(none.head.find("WWW-Authenticate: Basic realm=\"ibprobe\""), std::string::npos)
      << none.head;
  EXPECT_EQ(none.body.find("rdma_port_"), std::string::npos);
  EXPECT_EQ(get_with(exporter.port(), "/metrics", "Basic " + base64("prometheus:wrong")).status,
            401);
  EXPECT_EQ(get_with(exporter.port(), "/metrics", "Basic " + base64("nobody:s3cret pass")).status,
            401);
  EXPECT_TRUE(is_metrics(
      get_with(exporter.port(), "/metrics", "Basic " + base64("prometheus:s3cret pass"))));
  // Every path needs credentials unless listed, including the health endpoints.
  EXPECT_EQ(http_get(exporter.port(), "/-/healthy").status, 401);
}

TEST(HttpBasicAuth, UnauthenticatedPathsStayOpenAndOnlyThose) {
  WebConfig web;
  web.basic_auth_users["prometheus"] = bcrypt("s3cret pass");
  web.unauthenticated_paths = {"/metrics", "/-/healthy"};
  const Exporter exporter(web);
  EXPECT_TRUE(is_metrics(http_get(exporter.port(), "/metrics")));
  EXPECT_EQ(http_get(exporter.port(), "/-/healthy").status, 200);
  EXPECT_EQ(http_get(exporter.port(), "/-/ready").status, 401);
  EXPECT_EQ(http_get(exporter.port(), "/probe?target=x").status, 401);
  // Dot segments are resolved before the path is compared, so they do not escape the check.
  EXPECT_EQ(http_get(exporter.port(), "/metrics/../probe").status, 401);
}

TEST(HttpBearerToken, TokensAreChecked) {
  WebConfig web;
  web.bearer_token_hashes = {bcrypt("tok-1"), bcrypt("tok-2")};
  const Exporter exporter(web);
  const auto none = http_get(exporter.port(), "/metrics");
  EXPECT_EQ(none.status, 401);
  EXPECT_NE(none.head.find("WWW-Authenticate: Bearer realm=\"ibprobe\""), std::string::npos);
  EXPECT_TRUE(is_metrics(get_with(exporter.port(), "/metrics", "Bearer tok-2")));
  EXPECT_TRUE(is_metrics(get_with(exporter.port(), "/metrics", "Bearer tok-1")));
  EXPECT_EQ(get_with(exporter.port(), "/metrics", "Bearer tok-3").status, 401);
  EXPECT_EQ(get_with(exporter.port(), "/metrics", "Basic " + base64("tok-1:tok-1")).status, 401);
}

TEST(HttpAuth, RefusedRequestBodyIsNotRead) {
  WebConfig web;
  web.basic_auth_users["prometheus"] = bcrypt("pw");
  const Exporter exporter(web);
  const auto response = http_request(exporter.port(),
                                     "POST /probe HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                                     "Connection: keep-alive\r\n\r\nhello");
  EXPECT_EQ(response.status, 401);
  EXPECT_NE(response.head.find("Connection: close"), std::string::npos);
}

// ------------------------------------------------------------------------------------ TLS

class Pki {
 public:
  Pki() {
    dir_ = std::filesystem::temp_directory_path() / ("ibprobe_tls_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    const std::string d = dir_.string();
    const std::string key = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 ";
    run("openssl req -x509" + key + "-keyout " + d + "/server.key -out " + d +
        "/server.crt -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1");
    run("openssl req -x509" + key + "-keyout " + d + "/ca.key -out " + d + "/ca.crt -subj /CN=ca");
    run("openssl req" + key + "-keyout " + d + "/client.key -out " + d +
        "/client.csr -subj /CN=client");
    run("openssl x509 -req -days 2 -in " + d + "/client.csr -CA " + d + "/ca.crt -CAkey " + d +
        "/ca.key -CAcreateserial -out " + d + "/client.crt");
    // A client certificate from an authority the server does not trust.
    run("openssl req -x509" + key + "-keyout " + d + "/rogue.key -out " + d +
        "/rogue.crt -subj /CN=client");
  }
  ~Pki() { std::filesystem::remove_all(dir_); }
  std::filesystem::path file(const std::string& name) const { return dir_ / name; }

  // A web config file next to the certificates, naming them relative to itself.
  WebConfig web_config(const std::string& tls_lines, const std::string& rest = "") const {
    const auto path = dir_ / "web.yml";
    std::ofstream(path) << "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                        << tls_lines << rest;
    auto loaded = exporter::load_web_config(path);
    if (!loaded) throw std::runtime_error(loaded.error());
    return loaded.value();
  }

 private:
  static void run(const std::string& command) {
    if (std::system((command + " >/dev/null 2>&1").c_str()) != 0) {
      throw std::runtime_error("failed: " + command);
    }
  }
  std::filesystem::path dir_;
};

struct TlsOutcome {
  bool handshake = false;
  std::string error;
  RawResponse response;
  std::string version;
};

struct TlsClient {
  std::filesystem::path ca;  // trusted for the server's certificate
  std::filesystem::path cert = {}, key = {};
  int max_version = 0;
};

std::string ssl_errors() {
  std::string text;
  while (const unsigned long code = ERR_get_error()) {
    char line[256];
    ERR_error_string_n(code, line, sizeof(line));
    text += std::string(line) + "; ";
  }
  return text;
}

TlsOutcome https_request(int port, const TlsClient& client, const std::string& request) {
  TlsOutcome outcome;
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                        SSL_CTX_free);
  SSL_CTX_load_verify_locations(ctx.get(), client.ca.c_str(), nullptr);
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  if (client.max_version) SSL_CTX_set_max_proto_version(ctx.get(), client.max_version);
  if (!client.cert.empty()) {
    SSL_CTX_use_certificate_file(ctx.get(), client.cert.c_str(), SSL_FILETYPE_PEM);
    SSL_CTX_use_PrivateKey_file(ctx.get(), client.key.c_str(), SSL_FILETYPE_PEM);
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    outcome.error = "connect failed";
    return outcome;
  }
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), SSL_free);
  SSL_set_fd(ssl.get(), fd);
  SSL_set_tlsext_host_name(ssl.get(), "localhost");
  SSL_set1_host(ssl.get(), "localhost");
  if (SSL_connect(ssl.get()) != 1) {
    outcome.error = "handshake failed: " + ssl_errors();
    ::close(fd);
    return outcome;
  }
  outcome.handshake = true;
  outcome.version = SSL_get_version(ssl.get());
  SSL_write(ssl.get(), request.data(), static_cast<int>(request.size()));
  std::string raw;
  char buffer[16384];
  for (int n; (n = SSL_read(ssl.get(), buffer, sizeof(buffer))) > 0;) raw.append(buffer, n);
  outcome.error = ssl_errors();
  ::close(fd);
  const auto split = raw.find("\r\n\r\n");
  outcome.response.head = raw.substr(0, split);
  outcome.response.body = split == std::string::npos ? "" : raw.substr(split + 4);
  if (raw.starts_with("HTTP/1.1 ")) outcome.response.status = std::stoi(raw.substr(9, 3));
  return outcome;
}

TlsOutcome https_get(int port, const TlsClient& client, const std::string& path,
                     const std::string& extra_headers = "") {
  return https_request(port, client,
                       "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n" + extra_headers +
                           "Connection: close\r\n\r\n");
}

class HttpTls : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { pki_ = new Pki(); }
  static void TearDownTestSuite() {
    delete pki_;
    pki_ = nullptr;
  }
  static Pki* pki_;
};
Pki* HttpTls::pki_ = nullptr;

TEST_F(HttpTls, ServesMetricsOverAVerifiedHandshake) {
  const Exporter exporter(pki_->web_config(""));
  const auto outcome = https_get(exporter.port(), {pki_->file("server.crt")}, "/metrics");
  ASSERT_TRUE(outcome.handshake) << outcome.error;
  EXPECT_TRUE(is_metrics(outcome.response)) << outcome.response.head;
}

TEST_F(HttpTls, PlainHttpToTheTlsPortGetsNoAnswer) {
  const Exporter exporter(pki_->web_config(""));
  RawResponse response;
  try {
    response = http_get(exporter.port(), "/metrics");
  } catch (const std::exception&) {
  }
  EXPECT_EQ(response.status, 0) << response.head;
  EXPECT_EQ(response.body.find("rdma_port_"), std::string::npos);
}

TEST_F(HttpTls, ClientThatDoesNotTrustTheCertificateFails) {
  const Exporter exporter(pki_->web_config(""));
  const auto outcome = https_get(exporter.port(), {pki_->file("ca.crt")}, "/metrics");
  EXPECT_FALSE(outcome.handshake);
}

// The alert receiver's outgoing requests over HTTPS (post_json, with its client library loaded on
// the first https URL): the server's certificate is checked against the authorities given, for
// the address asked for, unless told not to. A POST to /metrics is answered 405: the exchange
// went through.
TEST_F(HttpTls, OutgoingPostsCheckTheServersCertificate) {
  const Exporter exporter(pki_->web_config(""));
  using namespace std::chrono_literals;
  const auto post = [&](const std::string& host, const exporter::TlsClientOptions& tls,
                        bool https = true) {
    const exporter::HttpUrl url{host, std::to_string(exporter.port()), "/metrics", https};
    return exporter::post_json(url, "{}", std::chrono::steady_clock::now() + 5s, {}, tls);
  };
  const auto trusted = post("127.0.0.1", {pki_->file("server.crt").string()});
  ASSERT_TRUE(trusted.has_value()) << trusted.error();
  EXPECT_EQ(trusted->status, 405);
  // The certificate names localhost and 127.0.0.1, both checked.
  EXPECT_EQ(post("localhost", {pki_->file("server.crt").string()}).value().status, 405);
  const auto untrusted = post("127.0.0.1", {pki_->file("ca.crt").string()});
  ASSERT_FALSE(untrusted.has_value());
  EXPECT_EQ(untrusted.error(), "TLS handshake with 127.0.0.1 failed: self-signed certificate");
  EXPECT_EQ(post("127.0.0.1", {"", true}).value().status, 405);
  // Plain HTTP to the TLS port gets no HTTP reply.
  EXPECT_FALSE(post("127.0.0.1", {}, false).has_value());
}

TEST_F(HttpTls, MinimumVersionIsEnforced) {
  const Exporter exporter(pki_->web_config("  min_version: TLS13\n"));
  const auto old =
      https_get(exporter.port(), {pki_->file("server.crt"), {}, {}, TLS1_2_VERSION}, "/metrics");
  EXPECT_FALSE(old.handshake && old.response.status == 200);
  const auto current = https_get(exporter.port(), {pki_->file("server.crt")}, "/metrics");
  EXPECT_TRUE(current.handshake) << current.error;
  EXPECT_EQ(current.version, "TLSv1.3");
}

TEST_F(HttpTls, ClientCertificatesWhenRequired) {
  const Exporter exporter(pki_->web_config(
      "  client_ca_file: ca.crt\n  client_auth_type: RequireAndVerifyClientCert\n"));
  const auto with_cert = https_get(
      exporter.port(),
      {pki_->file("server.crt"), pki_->file("client.crt"), pki_->file("client.key")}, "/metrics");
  EXPECT_TRUE(with_cert.handshake) << with_cert.error;
  EXPECT_TRUE(is_metrics(with_cert.response));
  // With TLS 1.3 the client learns of the refusal on its first read, not in SSL_connect.
  const auto without = https_get(exporter.port(), {pki_->file("server.crt")}, "/metrics");
  EXPECT_EQ(without.response.status, 0) << without.response.head;
  const auto rogue = https_get(
      exporter.port(), {pki_->file("server.crt"), pki_->file("rogue.crt"), pki_->file("rogue.key")},
      "/metrics");
  EXPECT_EQ(rogue.response.status, 0) << rogue.response.head;
}

TEST_F(HttpTls, BasicAuthOverTls) {
  const Exporter exporter(
      pki_->web_config("", "basic_auth_users:\n  prometheus: " + bcrypt("pw") + "\n"));
  const TlsClient client{pki_->file("server.crt")};
  EXPECT_EQ(https_get(exporter.port(), client, "/metrics").response.status, 401);
  EXPECT_TRUE(is_metrics(https_get(exporter.port(), client, "/metrics",
                                   "Authorization: Basic " + base64("prometheus:pw") + "\r\n")
                             .response));
}

TEST_F(HttpTls, UnusableKeyIsAStartupError) {
  // The CA's key does not belong to the server's certificate.
  std::filesystem::copy_file(pki_->file("ca.key"), pki_->file("other.key"),
                             std::filesystem::copy_options::overwrite_existing);
  auto web = pki_->web_config("");
  web.tls->key_file = pki_->file("other.key");
  try {
    const Exporter exporter(web);
    FAIL() << "started with a key that does not match its certificate";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("key_file " + pki_->file("other.key").string()),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ibprobe::testing
