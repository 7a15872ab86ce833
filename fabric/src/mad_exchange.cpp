#include "mad_exchange.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

namespace ibprobe::fabric {

using collectors::classify_errno;
using collectors::ReadError;
namespace {

using std::chrono::milliseconds;

// The kernel overwrites the upper 32 bits of a sent TID with its agent's ID, so only the lower
// 32 bits are ours to match on. Starting at a random value keeps a restarted exporter from
// accepting answers meant for its previous run.
std::uint32_t next_transaction_id() {
  static std::atomic<std::uint32_t> next{std::random_device{}()};
  return next.fetch_add(1);
}

}  // namespace

std::string describe(const MadQuery& query) {
  std::string text = "lid " + std::to_string(query.lid);
  if (mad::is_per_port(query.attribute)) {
    text += query.port_select == mad::kAllPorts ? " all ports"
                                                : " port " + std::to_string(query.port_select);
  } else if (query.attribute == mad::Attribute::kPortInfoExtended) {
    text += " port " + std::to_string(query.attribute_modifier);
  }
  return text + " " + std::string(mad::to_string(query.attribute));
}

std::vector<MadExchange::Answer> MadExchange::run(const std::vector<MadQuery>& queries) {
  queries_ = &queries;
  results_.assign(queries.size(), std::nullopt);
  unsupported_.assign(queries.size(), false);
  attempts_.assign(queries.size(), 0);
  pending_.clear();
  in_flight_.clear();
  for (std::size_t q = 0; q < queries.size(); ++q) pending_.push_back(q);

  while ((!pending_.empty() || !in_flight_.empty()) && Clock::now() < deadline_) {
    expire(Clock::now());
    send_pending();
    if (in_flight_.empty()) continue;
    auto wake = deadline_;
    for (const auto& f : in_flight_) wake = std::min(wake, f.expires);
    const auto wait = std::chrono::ceil<milliseconds>(wake - Clock::now());
    if (auto received = transport_.receive(std::max(wait, milliseconds(0)))) accept(*received);
  }
  for (const auto& f : in_flight_) over_budget(f.query);
  for (const auto q : pending_) over_budget(q);
  return std::move(results_);
}

void MadExchange::fail(std::size_t q, ReadError reason, const std::string& why) {
  errors_.record(reason, describe((*queries_)[q]) + ": " + why);
}

void MadExchange::over_budget(std::size_t q) {
  fail(q, ReadError::kBudgetExceeded,
       "scrape budget of " + std::to_string(limits_.budget.count()) + " ms used up");
}

void MadExchange::retry_or_fail(std::size_t q) {
  if (attempts_[q] <= limits_.retries) {
    pending_.push_back(q);
    return;
  }
  fail(q, ReadError::kTimeout,
       "no answer to " + std::to_string(attempts_[q]) + " attempt(s) of " +
           std::to_string(limits_.timeout.count()) + " ms");
}

void MadExchange::expire(Clock::time_point now) {
  std::erase_if(in_flight_, [&](const InFlight& f) {
    if (f.expires > now) return false;
    retry_or_fail(f.query);
    return true;
  });
}

void MadExchange::send_pending() {
  const auto limit = static_cast<std::size_t>(std::max(limits_.concurrency, 1));
  while (!pending_.empty() && in_flight_.size() < limit) {
    const std::size_t q = pending_.front();
    pending_.pop_front();
    const MadQuery& query = (*queries_)[q];
    const std::uint32_t tid = next_transaction_id();
    const auto request = mad::encode_get(
        {query.mgmt_class, query.attribute, tid, query.port_select, query.attribute_modifier});
    ++attempts_[q];
    ++mads_sent_;
    if (const int err = transport_.send(query.lid, request, limits_.timeout); err != 0) {
      fail(q, classify_errno(err), std::string("send failed: ") + std::strerror(err));
      continue;
    }
    in_flight_.push_back({q, tid, Clock::now() + limits_.timeout});
  }
}

void MadExchange::accept(const MadTransport::Received& received) {
  const auto header = mad::decode_header(received.mad);
  if (!header) return;  // not even a header: nothing to match it with
  const auto tid = static_cast<std::uint32_t>(header->transaction_id);
  const auto it = std::find_if(in_flight_.begin(), in_flight_.end(),
                               [&](const InFlight& f) { return f.transaction_id == tid; });
  // A late answer to an attempt already retried or given up on.
  if (it == in_flight_.end()) return;
  const std::size_t q = it->query;
  in_flight_.erase(it);
  if (received.status == ETIMEDOUT) {
    retry_or_fail(q);
    return;
  }
  if (received.status != 0) {
    fail(q, classify_errno(received.status),
         std::string("transport error: ") + std::strerror(received.status));
    return;
  }
  const MadQuery& query = (*queries_)[q];
  if (header->base_version != mad::kBaseVersion || header->class_version != mad::kClassVersion ||
      header->method != mad::Method::kGetResp || header->mgmt_class != query.mgmt_class ||
      header->attribute != query.attribute) {
    fail(q, ReadError::kMalformed, "answer is not the GetResp of this attribute");
    return;
  }
  if (header->status != 0 && query.may_be_unsupported &&
      mad::is_unsupported_status(header->status)) {
    unsupported_[q] = true;
    return;
  }
  if (header->status != 0) {
    fail(q, ReadError::kMadStatus, "MAD status " + mad::describe_status(header->status));
    return;
  }
  const auto data = mad::data_of(received.mad);
  if (data.empty()) {
    fail(q, ReadError::kMalformed,
         "truncated answer of " + std::to_string(received.mad.size()) + " bytes");
    return;
  }
  if (mad::is_per_port(query.attribute) && mad::port_select_of(data) != query.port_select) {
    fail(q, ReadError::kMalformed,
         "answer is for port " + std::to_string(mad::port_select_of(data)));
    return;
  }
  results_[q] = received.mad;
}

}  // namespace ibprobe::fabric
