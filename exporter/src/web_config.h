// The HTTP server's security settings (--web.config.file), in the format of the Prometheus
// exporter-toolkit (docs/web-configuration.md): TLS and basic auth, plus two ibprobe extensions,
// bearer tokens and paths that are served without authentication.
#pragma once

#include <expected>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace ibprobe::exporter {

// exporter-toolkit's client_auth_type values, with Go's crypto/tls meaning.
enum class ClientAuth {
  kNoClientCert,
  kRequestClientCert,           // asked for, not required, not verified
  kRequireAnyClientCert,        // required, not verified
  kVerifyClientCertIfGiven,     // not required, verified against client_ca_file when sent
  kRequireAndVerifyClientCert,  // required and verified against client_ca_file
};

struct TlsServerConfig {
  std::filesystem::path cert_file;  // PEM, the server certificate followed by its chain
  std::filesystem::path key_file;   // PEM
  std::filesystem::path client_ca_file;
  ClientAuth client_auth = ClientAuth::kNoClientCert;
  std::string min_version = "TLS12";  // TLS10, TLS11, TLS12 or TLS13
  std::string max_version = "TLS13";
};

struct WebConfig {
  std::optional<TlsServerConfig> tls;
  std::map<std::string, std::string> basic_auth_users;  // user name -> bcrypt hash
  std::vector<std::string> bearer_token_hashes;         // bcrypt hashes of accepted tokens
  std::set<std::string> unauthenticated_paths;          // exact request paths

  bool auth_required() const { return !basic_auth_users.empty() || !bearer_token_hashes.empty(); }
};

// Parses the YAML text of a web config file. Relative file names in it are resolved against
// `base_dir` (the file's directory), as exporter-toolkit does. On error, the text names the line
// and the reason; unknown keys are errors.
std::expected<WebConfig, std::string> parse_web_config(std::string_view text,
                                                       const std::filesystem::path& base_dir = {});

// Reads, parses and checks a web config file: the files it names must be readable. Errors name
// the file.
std::expected<WebConfig, std::string> load_web_config(const std::filesystem::path& path);

// True when `secret` hashes to `hash` (bcrypt through libxcrypt's crypt_rn). Compares in
// constant time; false for a malformed hash.
bool check_password(const std::string& hash, std::string_view secret);

// Decides whether a request may be served, from its path and its Authorization header.
// Successful checks are remembered (as digests, never the secrets) so a scraper paying bcrypt's
// deliberate cost once per credential, not once per request.
class Authenticator {
 public:
  explicit Authenticator(const WebConfig& config);
  bool allowed(const std::string& path, const std::string* authorization) const;
  bool offers_bearer() const { return !tokens_.empty(); }

 private:
  bool verified(const std::string& hash, std::string_view secret) const;
  bool check_basic(std::string_view credentials) const;
  bool check_bearer(std::string_view token) const;

  std::map<std::string, std::string> users_;
  std::vector<std::string> tokens_;
  std::set<std::string> open_paths_;
  bool required_ = false;
  mutable std::mutex mutex_;
  mutable std::unordered_set<std::string> verified_;
};

}  // namespace ibprobe::exporter
