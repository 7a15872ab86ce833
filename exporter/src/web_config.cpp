#include "web_config.h"

#include <crypt.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include "ibprobe/crypto.h"
#include "ibprobe/yaml_reader.h"

namespace ibprobe::exporter {
namespace {

using yaml::fail;
using yaml::scalar;

// bcrypt only, as exporter-toolkit: libxcrypt would also take DES and MD5 crypt, which are weak.
bool is_bcrypt(const std::string& hash) {
  static const std::regex kBcrypt(R"(\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53})");
  return std::regex_match(hash, kBcrypt);
}

std::string bcrypt_hash(const YAML::Node& node, const std::string& name) {
  auto hash = scalar(node, name);
  if (!is_bcrypt(hash)) {
    fail(node, name +
                   " must be a bcrypt hash ($2a$, $2b$ or $2y$, e.g. from `htpasswd -nBC 10 "
                   "\"\" | tr -d ':\\n'`)");
  }
  return hash;
}

// Iterates a mapping's keys, rejecting duplicates, non-string keys and keys not in `known`.
template <class Handle>
void for_each_key(const YAML::Node& map, const std::string& section,
                  const std::set<std::string>& known, const std::set<std::string>& unsupported,
                  Handle handle) {
  if (map.IsNull()) return;
  if (!map.IsMap()) fail(map, (section.empty() ? "the file" : section) + " must be a mapping");
  std::set<std::string> seen;
  for (const auto& entry : map) {
    const auto key = scalar(entry.first, "a key");
    const std::string name = section.empty() ? key : section + "." + key;
    if (!seen.insert(key).second) fail(entry.first, "duplicate key " + name);
    if (unsupported.contains(key)) {
      fail(entry.first, name + " (an exporter-toolkit setting) is not supported by ibprobe");
    }
    if (!known.contains(key)) fail(entry.first, "unknown key " + name);
    handle(key, entry.first, entry.second);
  }
}

std::filesystem::path resolve(const std::filesystem::path& base, const std::string& file) {
  const std::filesystem::path path(file);
  return path.is_absolute() || base.empty() ? path : base / path;
}

ClientAuth client_auth(const YAML::Node& node) {
  static const std::map<std::string, ClientAuth> kTypes = {
      {"NoClientCert", ClientAuth::kNoClientCert},
      {"RequestClientCert", ClientAuth::kRequestClientCert},
      {"RequireAnyClientCert", ClientAuth::kRequireAnyClientCert},
      {"VerifyClientCertIfGiven", ClientAuth::kVerifyClientCertIfGiven},
      {"RequireAndVerifyClientCert", ClientAuth::kRequireAndVerifyClientCert}};
  const auto text = scalar(node, "tls_server_config.client_auth_type");
  const auto it = kTypes.find(text);
  if (it == kTypes.end()) {
    fail(node, "tls_server_config.client_auth_type '" + text +
                   "' is not one of NoClientCert, RequestClientCert, RequireAnyClientCert, "
                   "VerifyClientCertIfGiven, RequireAndVerifyClientCert");
  }
  return it->second;
}

std::string tls_version(const YAML::Node& node, const std::string& name) {
  const auto text = scalar(node, name);
  if (text != "TLS10" && text != "TLS11" && text != "TLS12" && text != "TLS13") {
    fail(node, name + " '" + text + "' is not one of TLS10, TLS11, TLS12, TLS13");
  }
  return text;
}

TlsServerConfig tls_config(const YAML::Node& node, const std::filesystem::path& base) {
  TlsServerConfig tls;
  std::optional<YAML::Node> ca_node;
  for_each_key(
      node, "tls_server_config",
      {"cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version", "max_version"},
      {"cert", "key", "client_ca", "client_allowed_sans", "cipher_suites", "curve_preferences",
       "prefer_server_cipher_suites"},
      [&](const std::string& key, const YAML::Node&, const YAML::Node& value) {
        const std::string name = "tls_server_config." + key;
        if (key == "cert_file") tls.cert_file = resolve(base, scalar(value, name));
        if (key == "key_file") tls.key_file = resolve(base, scalar(value, name));
        if (key == "client_ca_file") {
          tls.client_ca_file = resolve(base, scalar(value, name));
          ca_node = value;
        }
        if (key == "client_auth_type") tls.client_auth = client_auth(value);
        if (key == "min_version") tls.min_version = tls_version(value, name);
        if (key == "max_version") tls.max_version = tls_version(value, name);
      });
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    fail(node, "tls_server_config needs both cert_file and key_file");
  }
  const bool verifies = tls.client_auth == ClientAuth::kVerifyClientCertIfGiven ||
                        tls.client_auth == ClientAuth::kRequireAndVerifyClientCert;
  if (verifies && tls.client_ca_file.empty()) {
    fail(node,
         "tls_server_config.client_auth_type verifies client certificates, which needs "
         "client_ca_file");
  }
  if (!verifies && ca_node) {
    fail(*ca_node,
         "tls_server_config.client_ca_file is set but client_auth_type does not verify "
         "client certificates (use RequireAndVerifyClientCert)");
  }
  if (tls.min_version > tls.max_version) {
    fail(node, "tls_server_config.min_version is above max_version");
  }
  return tls;
}

WebConfig parse(const YAML::Node& root, const std::filesystem::path& base,
                std::optional<std::filesystem::path>& tokens_file) {
  WebConfig config;
  for_each_key(
      root, "",
      {"tls_server_config", "basic_auth_users", "bearer_tokens", "bearer_tokens_file",
       "unauthenticated_paths"},
      {"http_server_config", "rate_limit"},
      [&](const std::string& key, const YAML::Node&, const YAML::Node& value) {
        if (key == "tls_server_config") config.tls = tls_config(value, base);
        if (key == "basic_auth_users") {
          if (value.IsNull()) return;
          if (!value.IsMap()) fail(value, "basic_auth_users must map user names to bcrypt hashes");
          for (const auto& user : value) {
            const auto name = scalar(user.first, "a user name");
            if (name.empty() || name.find(':') != std::string::npos) {
              fail(user.first, "user name '" + name + "' must be non-empty and without ':'");
            }
            if (!config.basic_auth_users
                     .emplace(name, bcrypt_hash(user.second, "the hash of user " + name))
                     .second) {
              fail(user.first, "user " + name + " is listed twice");
            }
          }
        }
        if (key == "bearer_tokens") {
          if (value.IsNull()) return;
          if (!value.IsSequence()) fail(value, "bearer_tokens must be a list of bcrypt hashes");
          for (const auto& hash : value) {
            config.bearer_token_hashes.push_back(bcrypt_hash(hash, "a bearer_tokens entry"));
          }
        }
        if (key == "bearer_tokens_file") tokens_file = resolve(base, scalar(value, key));
        if (key == "unauthenticated_paths") {
          if (value.IsNull()) return;
          if (!value.IsSequence()) fail(value, "unauthenticated_paths must be a list of paths");
          for (const auto& path : value) {
            const auto text = scalar(path, "an unauthenticated_paths entry");
            if (!text.starts_with("/"))
              fail(path, "unauthenticated path '" + text + "' must start with /");
            config.unauthenticated_paths.insert(text);
          }
        }
      });
  return config;
}

std::expected<WebConfig, std::string> parse_with_tokens_file(
    std::string_view text, const std::filesystem::path& base,
    std::optional<std::filesystem::path>& tokens_file) {
  try {
    return parse(yaml::load(text), base, tokens_file);
  } catch (const yaml::Error& e) {
    return std::unexpected(std::string(e.what()));
  } catch (const YAML::Exception& e) {
    // A conversion yaml-cpp refused while the document was walked; its text says where.
    return std::unexpected(std::string(e.what()));
  }
}

// The file's bytes, or why it cannot be read.
std::expected<std::string, std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::unexpected(path.string() + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string digest(const std::string& hash, std::string_view secret) {
  std::string input = hash;
  input.push_back('\0');
  input.append(secret);
  const auto out = crypto::sha256(input);
  crypto::cleanse(input.data(), input.size());
  return std::string(out.begin(), out.end());
}

std::optional<std::string> decode_base64(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  while (text.ends_with('=')) text.remove_suffix(1);
  std::string out;
  unsigned buffer = 0;
  int bits = 0;
  for (const char c : text) {
    const int v = value(c);
    if (v < 0) return std::nullopt;
    buffer = (buffer << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buffer >> bits) & 0xff));
    }
  }
  return out;
}

// "Scheme value" with the scheme matched case-insensitively (RFC 9110).
std::optional<std::string_view> credentials(std::string_view header, std::string_view scheme) {
  if (header.size() <= scheme.size() || header[scheme.size()] != ' ') return std::nullopt;
  for (std::size_t i = 0; i < scheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != scheme[i]) return std::nullopt;
  }
  auto value = header.substr(scheme.size() + 1);
  while (value.starts_with(' ')) value.remove_prefix(1);
  while (value.ends_with(' ')) value.remove_suffix(1);
  return value;
}

}  // namespace

std::expected<WebConfig, std::string> parse_web_config(std::string_view text,
                                                       const std::filesystem::path& base_dir) {
  std::optional<std::filesystem::path> tokens_file;
  auto parsed = parse_with_tokens_file(text, base_dir, tokens_file);
  if (tokens_file && parsed.has_value()) {
    auto& config = parsed.value();
    const auto tokens = read_file(*tokens_file);
    if (!tokens) return std::unexpected("bearer_tokens_file " + tokens.error());
    std::istringstream lines(*tokens);
    std::string line;
    for (int number = 1; std::getline(lines, line); ++number) {
      if (line.ends_with('\r')) line.pop_back();
      if (line.empty() || line.starts_with('#')) continue;
      if (!is_bcrypt(line)) {
        return std::unexpected("bearer_tokens_file " + tokens_file->string() + ": line " +
                               std::to_string(number) + ": not a bcrypt hash");
      }
      config.bearer_token_hashes.push_back(line);
    }
  }
  return parsed;
}

std::expected<WebConfig, std::string> load_web_config(const std::filesystem::path& path) {
  const auto text = read_file(path);
  if (!text) return std::unexpected("web config " + text.error());
  auto parsed = parse_web_config(*text, path.parent_path());
  if (!parsed) return std::unexpected("web config " + path.string() + ": " + parsed.error());
  const auto& config = parsed.value();
  if (config.tls) {
    for (const auto& file :
         {config.tls->cert_file, config.tls->key_file, config.tls->client_ca_file}) {
      if (file.empty()) continue;
      if (const auto readable = read_file(file); !readable) {
        return std::unexpected("web config " + path.string() + ": " + readable.error());
      }
    }
  }
  return parsed;
}

bool check_password(const std::string& hash, std::string_view secret) {
  // A C string cannot carry a NUL: a secret with one would be checked cut short.
  if (secret.find('\0') != std::string_view::npos) return false;
  const std::string phrase(secret);
  auto data = std::make_unique<crypt_data>();
  std::memset(data.get(), 0, sizeof(crypt_data));
  const char* result = crypt_rn(phrase.c_str(), hash.c_str(), data.get(), sizeof(crypt_data));
  const bool same = result && std::strlen(result) == hash.size() &&
                    crypto::equal_in_constant_time(result, hash.data(), hash.size());
  crypto::cleanse(data.get(), sizeof(crypt_data));
  return same;
}

Authenticator::Authenticator(const WebConfig& config)
    : users_(config.basic_auth_users),
      tokens_(config.bearer_token_hashes),
      open_paths_(config.unauthenticated_paths),
      required_(config.auth_required()) {}

bool Authenticator::verified(const std::string& hash, std::string_view secret) const {
  const auto key = digest(hash, secret);
  {
    std::lock_guard lock(mutex_);
    if (verified_.contains(key)) return true;
  }
  if (!check_password(hash, secret)) return false;
  std::lock_guard lock(mutex_);
  // Bounded: a user who keeps changing passwords cannot grow it without end.
  if (verified_.size() >= 1024) verified_.clear();
  verified_.insert(key);
  return true;
}

bool Authenticator::check_basic(std::string_view encoded) const {
  const auto decoded = decode_base64(encoded);
  if (!decoded) return false;
  const auto colon = decoded->find(':');
  if (colon == std::string::npos) return false;
  const auto user = users_.find(decoded->substr(0, colon));
  const std::string_view password = std::string_view(*decoded).substr(colon + 1);
  if (user == users_.end()) {
    // As long as for a real user, so the answer's timing does not tell which names exist.
    if (!users_.empty()) check_password(users_.begin()->second, password);
    return false;
  }
  return verified(user->second, password);
}

bool Authenticator::check_bearer(std::string_view token) const {
  return std::any_of(tokens_.begin(), tokens_.end(),
                     [&](const std::string& hash) { return verified(hash, token); });
}

bool Authenticator::allowed(const std::string& path, const std::string* authorization) const {
  if (!required_ || open_paths_.contains(path)) return true;
  if (!authorization) return false;
  if (const auto basic = credentials(*authorization, "basic")) return check_basic(*basic);
  if (const auto bearer = credentials(*authorization, "bearer")) return check_bearer(*bearer);
  return false;
}

}  // namespace ibprobe::exporter
