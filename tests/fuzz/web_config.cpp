// The web config file (TLS, basic auth, bearer tokens, unauthenticated paths) and the request
// decision made from it. Whatever is accepted must name its TLS files, resolve them against the
// config's directory, keep the TLS version range ordered, and decide requests without
// credentials exactly by the unauthenticated paths.
#include "web_config.h"

#include <string>

#include "fuzz.h"

namespace {

using namespace ibprobe::exporter;

int tls_rank(const std::string& version) {
  for (int rank = 0; const char* name : {"TLS10", "TLS11", "TLS12", "TLS13"}) {
    if (version == name) return rank;
    ++rank;
  }
  return -1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path base = "/etc/ibprobe";
  const auto parsed = parse_web_config(ibprobe::fuzz::text(data, size), base);
  const auto* config = (parsed ? &*parsed : nullptr);
  if (!config) {
    FUZZ_CHECK(!parsed.error().empty(), "refused without a reason");
    return 0;
  }
  if (config->tls) {
    const auto& tls = *config->tls;
    FUZZ_CHECK(!tls.cert_file.empty() && !tls.key_file.empty(), "TLS without cert or key file");
    for (const auto* file : {&tls.cert_file, &tls.key_file}) {
      FUZZ_CHECK(file->is_absolute(), "'%s' not resolved against %s", file->c_str(), base.c_str());
    }
    const int low = tls_rank(tls.min_version), high = tls_rank(tls.max_version);
    FUZZ_CHECK(low >= 0 && high >= 0 && low <= high, "TLS versions %s..%s", tls.min_version.c_str(),
               tls.max_version.c_str());
  }
  // Without an Authorization header no password is checked, so this stays fast.
  const Authenticator authenticator(*config);
  for (const auto& path : config->unauthenticated_paths) {
    FUZZ_CHECK(authenticator.allowed(path, nullptr), "unauthenticated path %s refused",
               path.c_str());
  }
  for (const std::string path : {"/metrics", "/probe", "/"}) {
    if (config->unauthenticated_paths.contains(path)) continue;
    FUZZ_CHECK(authenticator.allowed(path, nullptr) == !config->auth_required(),
               "%s without credentials: allowed %d, auth required %d", path.c_str(),
               authenticator.allowed(path, nullptr), config->auth_required());
  }
  const std::string garbage = "Basic !!!";
  if (config->auth_required() && !config->unauthenticated_paths.contains("/metrics")) {
    FUZZ_CHECK(!authenticator.allowed("/metrics", &garbage), "malformed credentials accepted");
  }
  return 0;
}
