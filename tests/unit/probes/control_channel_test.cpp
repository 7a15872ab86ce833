// What the initiator makes of a peer that speaks and hangs up during a run, over a real TCP
// connection on loopback: a message that arrived before the close is read, never taken for the
// close.
#include "control_channel.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "ibprobe/probe_failure.h"
#include "protocol.h"
#include "raw_peer.h"

namespace ibprobe::probes {
namespace {

using namespace std::chrono_literals;

// Both ends of one loopback TCP connection: the initiator's channel, and the peer's descriptor.
class ConnectedPair {
 public:
  ConnectedPair() {
    const auto listener = raw_peer::listen_on_loopback();
    initiator_fd_ = raw_peer::connect_to_loopback(listener.port);
    EXPECT_GE(initiator_fd_, 0);
    peer_fd_ = ::accept(listener.fd, nullptr, nullptr);
    ::close(listener.fd);
    initiator_.emplace(initiator_fd_);
  }
  ~ConnectedPair() {
    if (peer_fd_ >= 0) ::close(peer_fd_);
  }

  ControlChannel& initiator() { return *initiator_; }

  // The peer sends `message`, if any, and closes its end. Returns once the initiator's socket
  // shows the close, so that the message and the close are both there at the initiator's next
  // look, as when they arrive between two of its checks.
  void peer_says_and_closes(const std::optional<protocol::Message>& message) {
    {
      ControlChannel peer(peer_fd_);
      peer_fd_ = -1;
      if (message) peer.send(*message, std::chrono::steady_clock::now() + 5s);
    }
    pollfd p{initiator_fd_, POLLRDHUP, 0};
    ASSERT_EQ(::poll(&p, 1, 5000), 1);
  }

 private:
  int initiator_fd_ = -1;  // owned by initiator_
  int peer_fd_ = -1;
  std::optional<ControlChannel> initiator_;
};

// Whether `call` throws a ProbeFailure of `kind` whose message contains `text`.
::testing::AssertionResult fails_with(const std::function<void()>& call, FailureKind kind,
                                      const std::string& text) {
  try {
    call();
  } catch (const ProbeFailure& failure) {
    if (failure.kind() == kind && std::string(failure.what()).find(text) != std::string::npos) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << "failed as " << to_string(failure.kind()) << ": " << failure.what();
  }
  return ::testing::AssertionFailure() << "no ProbeFailure";
}

// A responder sends its result and closes at once: the initiator, still receiving the
// responder's last sends of a bidirectional run, must take the result rather than report a
// responder that stopped.
TEST(ControlChannel, AResultFollowedByTheCloseIsReadNotTakenForTheClose) {
  ConnectedPair pair;
  pair.peer_says_and_closes(protocol::Result{});
  auto& channel = pair.initiator();
  EXPECT_NO_THROW(channel.check_open_or_message_waiting());
  // The responder's own check, for which a peer that spoke and left mid-run has stopped.
  EXPECT_THROW(channel.check_still_open(), ProbeFailure);
  EXPECT_TRUE(channel.has_pending_message());
  EXPECT_NO_THROW(channel.expect<protocol::Result>(std::chrono::steady_clock::now() + 5s,
                                                   "the responder's result"));
}

// An Error and the close behind it: the failure has the Error's class and text.
TEST(ControlChannel, AnErrorFollowedByTheCloseKeepsItsClass) {
  ConnectedPair pair;
  pair.peer_says_and_closes(
      protocol::Error{protocol::ErrorCode::kVerbs, "send CQE status 12 (retry exceeded)"});
  EXPECT_TRUE(fails_with([&] { pair.initiator().fail_if_peer_spoke(); }, FailureKind::kVerbs,
                         "retry exceeded"));
}

// A close with nothing said is a lost peer, whichever check sees it.
TEST(ControlChannel, ACloseWithNothingSaidIsAPeerLost) {
  ConnectedPair pair;
  pair.peer_says_and_closes(std::nullopt);
  auto& channel = pair.initiator();
  for (const auto& check : std::initializer_list<std::function<void()>>{
           [&] { channel.check_open_or_message_waiting(); }, [&] { channel.fail_if_peer_spoke(); },
           [&] { channel.check_still_open(); }}) {
    EXPECT_TRUE(fails_with(check, FailureKind::kPeerLost, "closed the control connection"));
  }
}

// An open connection with nothing waiting passes every check.
TEST(ControlChannel, AnOpenQuietConnectionPassesTheChecks) {
  ConnectedPair pair;
  auto& channel = pair.initiator();
  EXPECT_NO_THROW(channel.check_open_or_message_waiting());
  EXPECT_NO_THROW(channel.fail_if_peer_spoke());
  EXPECT_NO_THROW(channel.check_still_open());
  EXPECT_FALSE(channel.has_pending_message());
}

}  // namespace
}  // namespace ibprobe::probes
