#include "peer_auth.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "ibprobe/crypto.h"
#include "ibprobe/probe_failure.h"

namespace ibprobe::probes::peer_auth {
namespace {

using protocol::Bytes;

// Versioned so a later scheme cannot be confused with this one.
constexpr std::string_view kLabel = "ibprobe control protocol v1 peer authentication";

void append(Bytes& out, std::span<const std::uint8_t> field) {
  // Length prefixes keep the transcript unambiguous: no two field lists give the same bytes.
  const auto size = static_cast<std::uint32_t>(field.size());
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<std::uint8_t>(size >> shift));
  out.insert(out.end(), field.begin(), field.end());
}

void append(Bytes& out, std::string_view text) {
  append(out, std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
}

Bytes transcript(std::string_view role, const Bytes& initiator_nonce,
                 const Bytes& responder_nonce) {
  Bytes out;
  append(out, kLabel);
  append(out, role);
  append(out, initiator_nonce);
  append(out, responder_nonce);
  return out;
}

Bytes hmac(std::string_view secret, const Bytes& message) {
  const auto digest = crypto::hmac_sha256(secret, message);
  return Bytes(digest.begin(), digest.end());
}

// Nothing when the initiator presented `proof`, else the Error refusing its request.
std::expected<void, protocol::Error> accept_if_presented(const Bytes& proof,
                                                         const std::optional<Bytes>& presented) {
  if (same_proof(proof, presented)) return {};
  return std::unexpected(
      protocol::Error{protocol::ErrorCode::kUnauthorized,
                      "the initiator could not prove it holds the shared secret"});
}

}  // namespace

Bytes nonce() {
  Bytes out(kNonceBytes);
  std::size_t filled = 0;
  while (filled < out.size()) {
    const auto n = ::getrandom(out.data() + filled, out.size() - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    }
    filled += static_cast<std::size_t>(n);
  }
  return out;
}

Bytes responder_proof(std::string_view secret, const Bytes& initiator_nonce,
                      const Bytes& responder_nonce) {
  return hmac(secret, transcript("responder", initiator_nonce, responder_nonce));
}

Bytes initiator_proof(std::string_view secret, const Bytes& initiator_nonce,
                      const Bytes& responder_nonce, const ProbeSpec& spec) {
  auto message = transcript("initiator", initiator_nonce, responder_nonce);
  // The spec as it travels (an unauthenticated request frame): both sides encode the spec they
  // hold, so any field changed on the way makes the proofs differ.
  append(message, protocol::encode(protocol::ProbeRequest{spec}));
  return hmac(secret, message);
}

Bytes initiator_mesh_proof(std::string_view secret, const Bytes& initiator_nonce,
                           const Bytes& responder_nonce) {
  return hmac(secret, transcript("mesh-initiator", initiator_nonce, responder_nonce));
}

Bytes initiator_proof(std::string_view secret, const Bytes& initiator_nonce,
                      const Bytes& responder_nonce, const protocol::VerifyRequest& request) {
  auto message = transcript("initiator", initiator_nonce, responder_nonce);
  auto unsigned_request = request;
  unsigned_request.authenticator.reset();
  append(message, protocol::encode(unsigned_request));
  return hmac(secret, message);
}

bool same_proof(const Bytes& expected, const std::optional<Bytes>& presented) {
  if (!presented || presented->size() != expected.size()) return false;
  return crypto::equal_in_constant_time(expected.data(), presented->data(), expected.size());
}

InitiatorAuth::InitiatorAuth(std::string secret) : secret_(std::move(secret)) {
  if (!secret_.empty()) nonce_ = nonce();
}

void InitiatorAuth::verify(const protocol::Hello& responder_hello, const std::string& peer) const {
  if (secret_.empty()) return;
  if (!responder_hello.challenge || !responder_hello.challenge_response) {
    throw ProbeFailure(peer + " does not authenticate itself: it has no shared secret configured",
                       FailureKind::kUnauthorized);
  }
  if (!same_proof(responder_proof(secret_, *nonce_, *responder_hello.challenge),
                  responder_hello.challenge_response)) {
    throw ProbeFailure(peer + " could not prove it holds the shared secret",
                       FailureKind::kUnauthorized);
  }
}

std::optional<Bytes> InitiatorAuth::authenticator(const protocol::Hello& responder_hello,
                                                  const ProbeSpec& spec) const {
  if (secret_.empty() || !responder_hello.challenge) return std::nullopt;
  return initiator_proof(secret_, *nonce_, *responder_hello.challenge, spec);
}

std::optional<Bytes> InitiatorAuth::mesh_authenticator(
    const protocol::Hello& responder_hello) const {
  if (secret_.empty() || !responder_hello.challenge) return std::nullopt;
  return initiator_mesh_proof(secret_, *nonce_, *responder_hello.challenge);
}

std::optional<Bytes> InitiatorAuth::authenticator(const protocol::Hello& responder_hello,
                                                  const protocol::VerifyRequest& request) const {
  if (secret_.empty() || !responder_hello.challenge) return std::nullopt;
  return initiator_proof(secret_, *nonce_, *responder_hello.challenge, request);
}

std::expected<protocol::Hello, protocol::Error> ResponderAuth::answer(
    const protocol::Hello& initiator_hello, const std::string& software_version) {
  protocol::Hello hello{protocol::kProtocolVersion, software_version, std::nullopt, std::nullopt};
  if (secret_.empty()) return hello;
  if (!initiator_hello.challenge) {
    return std::unexpected(protocol::Error{
        protocol::ErrorCode::kUnauthorized,
        "this responder requires peer authentication: the initiator needs the shared secret"});
  }
  initiator_nonce_ = *initiator_hello.challenge;
  responder_nonce_ = nonce();
  hello.challenge = responder_nonce_;
  hello.challenge_response = responder_proof(secret_, initiator_nonce_, responder_nonce_);
  return hello;
}

std::expected<void, protocol::Error> ResponderAuth::check(
    const protocol::ProbeRequest& request) const {
  if (secret_.empty()) return {};
  return accept_if_presented(
      initiator_proof(secret_, initiator_nonce_, responder_nonce_, request.spec),
      request.authenticator);
}

std::expected<void, protocol::Error> ResponderAuth::check(
    const protocol::MeshAddressRequest& request) const {
  if (secret_.empty()) return {};
  return accept_if_presented(initiator_mesh_proof(secret_, initiator_nonce_, responder_nonce_),
                             request.authenticator);
}

std::expected<void, protocol::Error> ResponderAuth::check(
    const protocol::VerifyRequest& request) const {
  if (secret_.empty()) return {};
  return accept_if_presented(initiator_proof(secret_, initiator_nonce_, responder_nonce_, request),
                             request.authenticator);
}

}  // namespace ibprobe::probes::peer_auth

namespace ibprobe::probes {

std::string load_shared_secret(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw std::invalid_argument(
        "secret file " + path.string() +
        (std::filesystem::exists(path, ec) ? " is not a regular file" : " does not exist"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::invalid_argument("secret file " + path.string() +
                                " cannot be read: " + std::strerror(errno));
  }
  std::string secret(kMaxSecretBytes + 1, '\0');
  in.read(secret.data(), static_cast<std::streamsize>(secret.size()));
  secret.resize(static_cast<std::size_t>(in.gcount()));
  if (secret.size() > kMaxSecretBytes) {
    throw std::invalid_argument("secret file " + path.string() + " is longer than " +
                                std::to_string(kMaxSecretBytes) + " bytes");
  }
  // Files written by editors and `echo` end in a newline the other side's file may lack.
  if (secret.ends_with('\n')) secret.pop_back();
  if (secret.ends_with('\r')) secret.pop_back();
  if (secret.empty()) throw std::invalid_argument("secret file " + path.string() + " is empty");
  if (secret.size() < kMinSecretBytes) {
    throw std::invalid_argument("secret file " + path.string() + " holds " +
                                std::to_string(secret.size()) + " bytes; a shared secret needs " +
                                std::to_string(kMinSecretBytes) + " at least");
  }
  return secret;
}

}  // namespace ibprobe::probes
