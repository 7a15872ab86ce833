// Mutual authentication of the control protocol's two ends with a shared secret.
//
// Each side sends a fresh random nonce in its Hello. The responder proves it holds the secret
// with HMAC-SHA256(secret, transcript("responder", both nonces)) in its Hello; the initiator
// proves it with HMAC-SHA256(secret, transcript("initiator", both nonces, the spec)) in its
// ProbeRequest. The role names keep one side's proof from being replayed as the other's, the
// other side's nonce keeps an old proof from being replayed at all, and the spec in the
// initiator's proof keeps it from being altered on the way. The messages after the handshake are
// not authenticated: the scheme keeps strangers from making a host allocate memory and send
// traffic; it is no defence against an attacker who can rewrite the TCP stream mid-run.
#pragma once

#include <cstddef>
#include <expected>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "ibprobe/probes.h"
#include "ibprobe/shared_secret.h"
#include "protocol.h"

namespace ibprobe::probes::peer_auth {

inline constexpr std::size_t kNonceBytes = 32;

// kNonceBytes from the kernel's CSPRNG; throws std::runtime_error when it cannot.
protocol::Bytes nonce();

protocol::Bytes responder_proof(std::string_view secret, const protocol::Bytes& initiator_nonce,
                                const protocol::Bytes& responder_nonce);
protocol::Bytes initiator_proof(std::string_view secret, const protocol::Bytes& initiator_nonce,
                                const protocol::Bytes& responder_nonce, const ProbeSpec& spec);
// The same proof over a whole verification request (its case and parameters, not only its spec).
protocol::Bytes initiator_proof(std::string_view secret, const protocol::Bytes& initiator_nonce,
                                const protocol::Bytes& responder_nonce,
                                const protocol::VerifyRequest& request);

// The initiator's proof for a mesh address request: its own role name, so a probe request's
// proof cannot be passed off as one, nor the other way round.
protocol::Bytes initiator_mesh_proof(std::string_view secret,
                                     const protocol::Bytes& initiator_nonce,
                                     const protocol::Bytes& responder_nonce);

// Compares in time independent of where the two differ.
bool same_proof(const protocol::Bytes& expected, const std::optional<protocol::Bytes>& presented);

// The initiator's half of the handshake. With an empty secret it sends no challenge and
// accepts any responder.
class InitiatorAuth {
 public:
  explicit InitiatorAuth(std::string secret);
  // For the initiator's Hello.
  std::optional<protocol::Bytes> challenge() const { return nonce_; }
  // Throws ProbeFailure (kUnauthorized) unless the responder's Hello proves the secret.
  void verify(const protocol::Hello& responder_hello, const std::string& peer) const;
  // For the ProbeRequest, once verify() has passed.
  std::optional<protocol::Bytes> authenticator(const protocol::Hello& responder_hello,
                                               const ProbeSpec& spec) const;
  // For the MeshAddressRequest, once verify() has passed.
  std::optional<protocol::Bytes> mesh_authenticator(const protocol::Hello& responder_hello) const;
  std::optional<protocol::Bytes> authenticator(const protocol::Hello& responder_hello,
                                               const protocol::VerifyRequest& request) const;

 private:
  std::string secret_;
  std::optional<protocol::Bytes> nonce_;
};

// The responder's half. With an empty secret every initiator is let through.
class ResponderAuth {
 public:
  explicit ResponderAuth(std::string secret) : secret_(std::move(secret)) {}
  // The Hello answering the initiator's, or the Error refusing an initiator that brought no
  // challenge when a secret is required.
  std::expected<protocol::Hello, protocol::Error> answer(const protocol::Hello& initiator_hello,
                                                         const std::string& software_version);
  // Nothing when the request's authenticator proves the secret for it, else the Error refusing it.
  std::expected<void, protocol::Error> check(const protocol::ProbeRequest& request) const;
  std::expected<void, protocol::Error> check(const protocol::MeshAddressRequest& request) const;
  std::expected<void, protocol::Error> check(const protocol::VerifyRequest& request) const;

 private:
  std::string secret_;
  protocol::Bytes initiator_nonce_;
  protocol::Bytes responder_nonce_;
};

}  // namespace ibprobe::probes::peer_auth
