// A MadTransport that replays recorded MAD exchanges: each expected request (compared byte for
// byte, transaction ID aside: it is chosen at run time) gets its recorded reply, with the
// request's transaction ID copied in as a PMA does. Replies can also be silence, an answer with
// a wrong transaction ID, or the transport's own timeout report.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "mad_bytes.h"
#include "mad_transport.h"

namespace ibprobe::testing {

class ReplayTransport final : public fabric::MadTransport {
 public:
  enum class Reply { kAnswer, kSilence, kWrongTid, kTransportTimeout };

  explicit ReplayTransport(bool sends_smps = true) : sends_smps_(sends_smps) {}

  void expect(std::uint16_t lid, Bytes request, Bytes response, Reply reply = Reply::kAnswer) {
    exchanges_.push_back({lid, std::move(request), std::move(response), reply, false});
  }
  void expect_silence(std::uint16_t lid, Bytes request) {
    expect(lid, std::move(request), {}, Reply::kSilence);
  }

  bool sends_smps() const override { return sends_smps_; }

  int send(std::uint16_t lid, std::span<const std::uint8_t> mad,
           std::chrono::milliseconds) override {
    sends_.push_back({lid, Bytes(mad.begin(), mad.end()), std::chrono::steady_clock::now()});
    const auto it = std::find_if(exchanges_.begin(), exchanges_.end(), [&](const Exchange& e) {
      return !e.used && e.lid == lid && same_but_tid(e.request, mad);
    });
    if (it == exchanges_.end()) {
      ADD_FAILURE() << "unexpected MAD to lid " << lid << " attribute 0x" << std::hex
                    << (mad[16] << 8 | mad[17]) << " port select " << int{mad[65]};
      return EIO;
    }
    it->used = true;
    switch (it->reply) {
      case Reply::kSilence:
        break;
      case Reply::kAnswer:
      case Reply::kWrongTid: {
        Bytes response = it->response;
        for (std::size_t i = 8; i < 16 && i < response.size(); ++i) response[i] = mad[i];
        if (it->reply == Reply::kWrongTid && response.size() > 15) response[15] ^= 0x5A;
        replies_.push_back({std::move(response), 0});
        break;
      }
      case Reply::kTransportTimeout:
        replies_.push_back({Bytes(mad.begin(), mad.end()), ETIMEDOUT});
        break;
    }
    return 0;
  }

  std::optional<Received> receive(std::chrono::milliseconds wait) override {
    if (replies_.empty()) {
      std::this_thread::sleep_for(wait);
      return std::nullopt;
    }
    auto reply = std::move(replies_.front());
    replies_.pop_front();
    return reply;
  }

  struct Sent {
    std::uint16_t lid;
    Bytes mad;
    std::chrono::steady_clock::time_point at;
  };
  const std::vector<Sent>& sends() const { return sends_; }
  std::size_t unused() const {
    return static_cast<std::size_t>(
        std::count_if(exchanges_.begin(), exchanges_.end(), [](const auto& e) { return !e.used; }));
  }

 private:
  struct Exchange {
    std::uint16_t lid;
    Bytes request;
    Bytes response;
    Reply reply;
    bool used;
  };

  static bool same_but_tid(const Bytes& expected, std::span<const std::uint8_t> actual) {
    if (expected.size() != actual.size()) return false;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      if ((i < 8 || i >= 16) && expected[i] != actual[i]) return false;
    }
    return true;
  }

  bool sends_smps_;
  std::vector<Exchange> exchanges_;
  std::deque<Received> replies_;
  std::vector<Sent> sends_;
};

}  // namespace ibprobe::testing
