// The bounded MAD exchange shared by the remote PMA and fabric collectors: a batch of Gets with
// at most `concurrency` in flight, each attempt bounded by `timeout`, a timed-out query retried
// `retries` times, everything stopped at one deadline. Each query yields its validated answer
// or costs exactly one record in the collectors::ErrorSink.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "ibprobe/collectors.h"
#include "mad_transport.h"
#include "pma_mad.h"

namespace ibprobe::fabric {

struct ExchangeLimits {
  std::chrono::milliseconds timeout{300};  // per MAD attempt
  int retries = 2;                         // further attempts after a timeout
  std::chrono::milliseconds budget{4000};  // the whole exchange; only named in messages here
  int concurrency = 8;                     // MADs in flight at once
};

struct MadQuery {
  std::uint16_t lid;
  mad::MgmtClass mgmt_class;
  mad::Attribute attribute;
  std::uint8_t port_select = 0;
  // An attribute the PMA may lack (mad::kDetailAttributes): a "not supported" status is then an
  // answer, reported by MadExchange::unsupported, not a loss.
  bool may_be_unsupported = false;
  std::uint32_t attribute_modifier = 0;  // PortInfoExtended: the port
};

// "lid 12 port 3 PortCounters", as error records name a query.
std::string describe(const MadQuery& query);

class MadExchange {
 public:
  using Clock = std::chrono::steady_clock;
  using Answer = std::optional<std::vector<std::uint8_t>>;

  MadExchange(MadTransport& transport, const ExchangeLimits& limits, Clock::time_point deadline,
              collectors::ErrorSink& errors)
      : transport_(transport), limits_(limits), deadline_(deadline), errors_(errors) {}

  // One answer per query, in the queries' order; nullopt for each that failed (and was recorded).
  std::vector<Answer> run(const std::vector<MadQuery>& queries);

  // Whether the last run's query `q` was answered "not supported" (may_be_unsupported only).
  bool unsupported(std::size_t q) const { return unsupported_[q]; }

  // MADs handed to the transport so far, retries included.
  std::size_t mads_sent() const { return mads_sent_; }

 private:
  struct InFlight {
    std::size_t query;
    std::uint32_t transaction_id;
    Clock::time_point expires;
  };

  void fail(std::size_t q, collectors::ReadError reason, const std::string& why);
  void over_budget(std::size_t q);
  void retry_or_fail(std::size_t q);
  void expire(Clock::time_point now);
  void send_pending();
  void accept(const MadTransport::Received& received);

  MadTransport& transport_;
  const ExchangeLimits& limits_;
  Clock::time_point deadline_;
  collectors::ErrorSink& errors_;
  const std::vector<MadQuery>* queries_ = nullptr;
  std::vector<Answer> results_;
  std::vector<bool> unsupported_;
  std::vector<int> attempts_;
  std::deque<std::size_t> pending_;
  std::vector<InFlight> in_flight_;
  std::size_t mads_sent_ = 0;
};

}  // namespace ibprobe::fabric
