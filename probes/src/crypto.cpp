#include "ibprobe/crypto.h"

#include <dlfcn.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/opensslv.h>

#include <stdexcept>
#include <string>

namespace ibprobe::crypto {
namespace {

// The soname of the libcrypto these headers declare, as its runtime package installs it
// (libssl3: libcrypto.so.3); the unversioned name exists only with the -dev package.
const std::string kLibrary = "libcrypto.so." + std::to_string(OPENSSL_VERSION_MAJOR);

// The functions used, typed from OpenSSL's own declarations.
struct Library {
  decltype(&::EVP_sha256) evp_sha256 = nullptr;
  decltype(&::EVP_Digest) evp_digest = nullptr;
  decltype(&::HMAC) hmac = nullptr;
  decltype(&::CRYPTO_memcmp) memcmp = nullptr;
  decltype(&::OPENSSL_cleanse) cleanse = nullptr;
};

template <typename Function>
void bind(void* handle, Function& slot, const char* name) {
  slot = reinterpret_cast<Function>(::dlsym(handle, name));
  if (!slot) throw std::runtime_error(kLibrary + " lacks " + name);
}

Library load() {
  // Never unloaded: OpenSSL keeps state of its own for the life of the process.
  void* handle = ::dlopen(kLibrary.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = ::dlerror();
    throw std::runtime_error("cannot load " + kLibrary + " (from OpenSSL, Debian package " +
                             "libssl3): " + (why ? why : "unknown error"));
  }
  Library library;
  bind(handle, library.evp_sha256, "EVP_sha256");
  bind(handle, library.evp_digest, "EVP_Digest");
  bind(handle, library.hmac, "HMAC");
  bind(handle, library.memcmp, "CRYPTO_memcmp");
  bind(handle, library.cleanse, "OPENSSL_cleanse");
  return library;
}

const Library& library() {
  // A failed load throws out of the initializer and is tried again on the next call.
  static const Library loaded = load();
  return loaded;
}

}  // namespace

void require() {
  library();
}

Sha256 sha256(std::string_view data) {
  const auto& lib = library();
  Sha256 out;
  unsigned length = 0;
  if (lib.evp_digest(data.data(), data.size(), out.data(), &length, lib.evp_sha256(), nullptr) !=
          1 ||
      length != out.size()) {
    throw std::runtime_error("SHA-256 failed");
  }
  return out;
}

Sha256 hmac_sha256(std::string_view key, std::span<const std::uint8_t> message) {
  const auto& lib = library();
  Sha256 out;
  unsigned length = 0;
  if (!lib.hmac(lib.evp_sha256(), key.data(), static_cast<int>(key.size()), message.data(),
                message.size(), out.data(), &length) ||
      length != out.size()) {
    throw std::runtime_error("HMAC-SHA256 failed");
  }
  return out;
}

bool equal_in_constant_time(const void* a, const void* b, std::size_t length) {
  return library().memcmp(a, b, length) == 0;
}

void cleanse(void* data, std::size_t length) {
  library().cleanse(data, length);
}

}  // namespace ibprobe::crypto
