#include "web_config.h"

#include <crypt.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <initializer_list>
#include <utility>

#include "ibprobe/exporter.h"

namespace ibprobe::exporter {
namespace {

using ::testing::HasSubstr;

// A bcrypt hash made with libxcrypt directly (cost 4 keeps the tests fast).
std::string bcrypt(const std::string& secret) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  if (!crypt_gensalt_rn("$2b$", 4, nullptr, 0, salt, sizeof(salt))) {
    throw std::runtime_error("crypt_gensalt_rn failed");
  }
  crypt_data data{};
  const char* hash = crypt_r(secret.c_str(), salt, &data);
  if (!hash || hash[0] == '*') throw std::runtime_error("crypt_r failed");
  return hash;
}

WebConfig parsed(const std::string& text, const std::filesystem::path& base = {}) {
  auto result = parse_web_config(text, base);
  if (!result) {
    ADD_FAILURE() << result.error();
    return {};
  }
  return *std::move(result);
}

std::string web_config_error(const std::string& text) {
  auto result = parse_web_config(text);
  if (!result) return result.error();
  return "accepted";
}

TEST(WebConfig, EmptyFileMeansNoTlsAndNoAuth) {
  const auto config = parsed("");
  EXPECT_FALSE(config.tls);
  EXPECT_FALSE(config.auth_required());
  EXPECT_FALSE(parsed("# only a comment\n").auth_required());
}

TEST(WebConfig, ExporterToolkitFileWithExtensions) {
  const auto alice = bcrypt("alice's password");
  const auto token = bcrypt("a token");
  const auto config = parsed(
      "tls_server_config:\n"
      "  cert_file: server.crt\n"
      "  key_file: /etc/ibprobe/server.key\n"
      "  client_ca_file: ca.crt\n"
      "  client_auth_type: RequireAndVerifyClientCert\n"
      "  min_version: TLS13\n"
      "basic_auth_users:\n"
      "  alice: " +
          alice +
          "\n"
          "bearer_tokens:\n"
          "  - " +
          token +
          "\n"
          "unauthenticated_paths: [/metrics, /-/healthy]\n",
      "/etc/ibprobe/web");
  ASSERT_TRUE(config.tls);
  EXPECT_EQ(config.tls->cert_file, "/etc/ibprobe/web/server.crt");
  EXPECT_EQ(config.tls->key_file, "/etc/ibprobe/server.key");
  EXPECT_EQ(config.tls->client_ca_file, "/etc/ibprobe/web/ca.crt");
  EXPECT_EQ(config.tls->client_auth, ClientAuth::kRequireAndVerifyClientCert);
  EXPECT_EQ(config.tls->min_version, "TLS13");
  EXPECT_EQ(config.basic_auth_users.at("alice"), alice);
  EXPECT_EQ(config.bearer_token_hashes, std::vector<std::string>{token});
  EXPECT_EQ(config.unauthenticated_paths, (std::set<std::string>{"/metrics", "/-/healthy"}));
  EXPECT_TRUE(config.auth_required());
}

TEST(WebConfig, TlsDefaultsFollowExporterToolkit) {
  const auto config = parsed("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n");
  ASSERT_TRUE(config.tls);
  EXPECT_EQ(config.tls->client_auth, ClientAuth::kNoClientCert);
  EXPECT_EQ(config.tls->min_version, "TLS12");
}

// Each text is refused with an error that contains what it is paired with.
void expect_refusals(std::initializer_list<std::pair<std::string, std::string>> refusals) {
  for (const auto& [text, error] : refusals) {
    EXPECT_THAT(web_config_error(text), HasSubstr(error)) << text;
  }
}

TEST(WebConfig, ErrorsNameTheLine) {
  EXPECT_EQ(web_config_error("basic_auth_users: {}\nbogus: 1\n"),
            "line 2, column 1: unknown key bogus");
  EXPECT_EQ(web_config_error("tls_server_config:\n  cert_file: a\n  key_file: b\n  cert_fil: c\n"),
            "line 4, column 3: unknown key tls_server_config.cert_fil");
  EXPECT_EQ(web_config_error("basic_auth_users:\n  alice: plaintext\n").substr(0, 15),
            "line 2, column ");
  expect_refusals({
      {"basic_auth_users:\n  alice: plaintext\n", "bcrypt"},
      {"tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: Sometimes\n",
       "line 4, column "},
      {"tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: SSL3\n",
       "line 4, column "},
      {"unauthenticated_paths:\n  - /metrics\n  - metrics\n", "line 3, column "},
  });
}

TEST(WebConfig, YamlSyntaxErrorsNameTheLine) {
  const auto error = web_config_error("basic_auth_users:\n  alice: x\n   bob: [\n");
  EXPECT_TRUE(error.starts_with("yaml-cpp: error at line 3, column ")) << error;
  EXPECT_NE(error, "accepted");
  EXPECT_TRUE(
      web_config_error("tls_server_config: [1, 2\n").starts_with("yaml-cpp: error at line "));
}

TEST(WebConfig, ExporterToolkitSettingsIbprobeLacksAreRefusedByName) {
  expect_refusals({
      {"http_server_config:\n  http2: false\n", "not supported"},
      {"tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: []\n",
       "line 4, column 3: tls_server_config.cipher_suites"},
  });
}

TEST(WebConfig, InconsistentTlsSettingsAreRefused) {
  expect_refusals({
      {"tls_server_config:\n  cert_file: a.crt\n", "key_file"},
      {"tls_server_config:\n  cert_file: a\n  key_file: b\n"
       "  client_auth_type: RequireAndVerifyClientCert\n",
       "client_ca_file"},
      {"tls_server_config:\n  cert_file: a\n  key_file: b\n  client_ca_file: c\n",
       "line 4, column "},
  });
  EXPECT_NE(web_config_error("tls_server_config:\n  cert_file: a\n  key_file: b\n"
                             "  min_version: TLS13\n  max_version: TLS12\n"),
            "accepted");
}

TEST(WebConfig, DuplicateKeysAndUsersAreRefused) {
  expect_refusals({
      {"bearer_tokens: []\nbearer_tokens: []\n", "line 2, column 1: duplicate"},
      {"basic_auth_users:\n  \"a:b\": " + bcrypt("x") + "\n", "':'"},
  });
}

class WebConfigFiles : public ::testing::Test {
 protected:
  WebConfigFiles() {
    dir_ = std::filesystem::temp_directory_path() /
           ("ibprobe_web_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  ~WebConfigFiles() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path write(const std::string& name, const std::string& content) {
    std::ofstream(dir_ / name) << content;
    return dir_ / name;
  }
  std::string load_error(const std::filesystem::path& path) {
    auto result = load_web_config(path);
    if (!result) return result.error();
    return "accepted";
  }
  std::filesystem::path dir_;
};

TEST_F(WebConfigFiles, BearerTokensFromAFileRelativeToTheConfig) {
  const auto one = bcrypt("one"), two = bcrypt("two");
  write("tokens", "# monitoring\n" + one + "\n\n" + two + "\n");
  const auto config = load_web_config(write("web.yml", "bearer_tokens_file: tokens\n"));
  ASSERT_TRUE(config.has_value()) << config.error();
  EXPECT_EQ(config.value().bearer_token_hashes, (std::vector<std::string>{one, two}));
  write("tokens", one + "\nnot a hash\n");
  EXPECT_NE(load_error(dir_ / "web.yml").find("line 2"), std::string::npos);
}

TEST_F(WebConfigFiles, MissingFilesAreNamed) {
  EXPECT_NE(load_error(dir_ / "absent.yml").find("absent.yml"), std::string::npos);
  const auto web = write("web.yml", "tls_server_config:\n  cert_file: server.crt\n  key_file: k\n");
  EXPECT_NE(load_error(web).find((dir_ / "server.crt").string()), std::string::npos);
  const auto bad = write("bad.yml", "bogus: 1\n");
  EXPECT_NE(load_error(bad).find(bad.string() + ": line 1, column 1: unknown key bogus"),
            std::string::npos)
      << load_error(bad);
}

TEST(Password, BcryptHashesAreChecked) {
  const auto hash = bcrypt("secret");
  EXPECT_TRUE(check_password(hash, "secret"));
  EXPECT_FALSE(check_password(hash, "Secret"));
  EXPECT_FALSE(check_password(hash, ""));
  EXPECT_FALSE(check_password(hash, std::string("secret\0more", 11)));
  EXPECT_FALSE(check_password("not a hash", "secret"));
  EXPECT_FALSE(check_password("", ""));
}

TEST(Authenticator, BasicAndBearerCredentials) {
  WebConfig config;
  config.basic_auth_users["alice"] = bcrypt("pw");
  config.bearer_token_hashes = {bcrypt("other"), bcrypt("tok3n")};
  config.unauthenticated_paths = {"/metrics"};
  const Authenticator auth(config);
  auto allowed = [&](const std::string& path, std::optional<std::string> header) {
    return auth.allowed(path, header ? &*header : nullptr);
  };
  EXPECT_TRUE(allowed("/metrics", std::nullopt));
  EXPECT_FALSE(allowed("/metrics/", std::nullopt));
  EXPECT_FALSE(allowed("/probe", std::nullopt));
  EXPECT_TRUE(allowed("/probe", "Basic YWxpY2U6cHc="));   // alice:pw
  EXPECT_TRUE(allowed("/probe", "basic YWxpY2U6cHc"));    // scheme case, no padding
  EXPECT_FALSE(allowed("/probe", "Basic YWxpY2U6cHd4"));  // alice:pwx
  EXPECT_FALSE(allowed("/probe", "Basic Ym9iOnB3"));      // bob:pw
  EXPECT_FALSE(allowed("/probe", "Basic YWxpY2U="));      // no colon
  EXPECT_FALSE(allowed("/probe", "Basic !!!!"));
  EXPECT_TRUE(allowed("/probe", "Bearer tok3n"));
  EXPECT_TRUE(allowed("/probe", "Bearer other"));
  EXPECT_FALSE(allowed("/probe", "Bearer tok3"));
  EXPECT_FALSE(allowed("/probe", "Bearer"));
  EXPECT_FALSE(allowed("/probe", "Digest tok3n"));
  // A remembered success must not let a different secret through.
  EXPECT_TRUE(allowed("/probe", "Bearer tok3n"));
  EXPECT_FALSE(allowed("/probe", "Bearer tok3nX"));
}

TEST(Authenticator, NothingConfiguredAllowsEverything) {
  const Authenticator auth(WebConfig{});
  EXPECT_TRUE(auth.allowed("/probe", nullptr));
}

}  // namespace
}  // namespace ibprobe::exporter

namespace ibprobe::exporter {
namespace {

// The flags that carry these settings: a bad file stops the process before it serves anything.
class SecurityFlags : public WebConfigFiles {
 protected:
  std::optional<int> parse(const std::vector<std::string>& flags) {
    std::vector<const char*> argv = {"ibprobe_exporter"};
    for (const auto& flag : flags) argv.push_back(flag.c_str());
    ::testing::internal::CaptureStderr();
    const auto exit_code = parse_flags(static_cast<int>(argv.size()), argv.data(), config_);
    stderr_ = ::testing::internal::GetCapturedStderr();
    return exit_code;
  }
  Config config_;
  std::string stderr_;
};

TEST_F(SecurityFlags, WebConfigFileIsLoadedOrRefused) {
  const auto good = write("good.yml", "basic_auth_users:\n  u: " + bcrypt("p") + "\n");
  EXPECT_EQ(parse({"--web.config.file=" + good.string()}), std::nullopt) << stderr_;
  ASSERT_NE(config_.web_config, nullptr);
  EXPECT_TRUE(config_.web_config->auth_required());
  const auto bad = write("bad.yml", "basic_auth_users:\n  u: p\n");
  EXPECT_EQ(parse({"--web.config.file=" + bad.string()}), 2);
  EXPECT_NE(stderr_.find("line 2"), std::string::npos) << stderr_;
  EXPECT_EQ(parse({"--web.config.file=" + (dir_ / "absent.yml").string()}), 2);
}

TEST_F(SecurityFlags, ProbeSecretFileIsLoadedOrRefused) {
  EXPECT_EQ(parse({"--probe.secret-file=" + write("s", "0123456789abcdef\n").string()}),
            std::nullopt)
      << stderr_;
  EXPECT_EQ(config_.probe_shared_secret, "0123456789abcdef");
  EXPECT_EQ(parse({"--probe.secret-file=" + write("short", "too short\n").string()}), 2);
  EXPECT_NE(stderr_.find("16"), std::string::npos) << stderr_;
  EXPECT_EQ(parse({"--probe.secret-file=" + write("empty", "").string()}), 2);
  EXPECT_NE(stderr_.find("empty"), std::string::npos) << stderr_;
  EXPECT_EQ(parse({"--probe.secret-file=" + (dir_ / "absent").string()}), 2);
}

}  // namespace
}  // namespace ibprobe::exporter
