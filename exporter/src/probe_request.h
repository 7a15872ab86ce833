// What a client asks of the probe API, parsed from a /probe query string or an async API JSON
// body. Untrusted input: every field is bounded and anything unexpected is refused with the
// reason, never ignored.
#pragma once

#include <cstdint>
#include <expected>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace ibprobe::exporter {

// The alert a run answers (the alert receiver's runs): kept with the run in the history.
struct AlertTrigger {
  std::string alertname;
  std::string fingerprint;
  std::string starts_at;
  std::map<std::string, std::string> labels;

  bool operator==(const AlertTrigger&) const = default;
};

struct ProbeParams {
  std::string target;
  std::string module;
  bool debug = false;
  // The lane of this run, overriding the module's (probes::ProbeSpec::sl, traffic_class,
  // pkey_index, dlid); ranges are checked with the rest of the spec.
  std::optional<std::uint32_t> sl = std::nullopt;
  std::optional<std::uint32_t> traffic_class = std::nullopt;
  std::optional<std::uint32_t> pkey_index = std::nullopt;
  std::optional<std::uint32_t> dlid = std::nullopt;

  std::optional<double> timeout_seconds;               // the client's bound on the whole run
  std::optional<AlertTrigger> trigger = std::nullopt;  // set by the alert receiver only

  bool has_lane() const { return sl || traffic_class || pkey_index || dlid; }
};

// application/x-www-form-urlencoded pairs, %XX and '+' decoded. Refuses malformed escapes,
// repeated or empty names, and more than a few kilobytes or parameters.
std::expected<std::map<std::string, std::string>, std::string> parse_query(std::string_view query);

// /probe?target=HOST:PORT&module=NAME[&debug=true][&timeout=SECONDS][&sl=N][&traffic_class=N]
// [&pkey_index=N][&dlid=N]
std::expected<ProbeParams, std::string> parse_probe_query(std::string_view query);

// {"target": "HOST:PORT", "module": "NAME", "timeout_seconds": 30, "sl": 0, "traffic_class": 0,
//  "pkey_index": 0, "dlid": 1}
std::expected<ProbeParams, std::string> parse_probe_json(std::string_view body);

// A wait bound such as "30s", "500ms" or "2" (seconds) as the API's ?wait= takes it.
std::optional<double> parse_wait_seconds(std::string_view text);

// What Prometheus' scrape timeout (the X-Prometheus-Scrape-Timeout-Seconds header, among the
// request's lower-cased `headers`) leaves for a request's work once the 0.5 s that
// blackbox_exporter keeps for sending the answer (its timeout_offset) is taken off: unset without
// the header, the reason for a header that is not a number of seconds.
std::expected<std::optional<double>, std::string> scrape_budget_seconds(
    const std::map<std::string, std::string>& headers);

}  // namespace ibprobe::exporter
