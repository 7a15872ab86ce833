// Alertmanager's webhook message as the alert receiver parses it: whatever is accepted holds
// within the documented bounds, and written out again as Alertmanager would send it, parses back
// to the same alerts.
#include <nlohmann/json.hpp>
#include <string>

#include "alert_webhook.h"
#include "fuzz.h"

namespace {

using namespace ibprobe::exporter;

void check_bounds(const WebhookMessage& message) {
  FUZZ_CHECK(message.alerts.size() <= kMaxWebhookAlerts, "%zu alerts accepted",
             message.alerts.size());
  for (const auto& alert : message.alerts) {
    FUZZ_CHECK(!alert.fingerprint.empty(), "an alert without a fingerprint accepted");
    FUZZ_CHECK(alert.labels.size() <= kMaxAlertLabels, "%zu labels accepted", alert.labels.size());
    for (const auto& [name, value] : alert.labels) {
      FUZZ_CHECK(name.size() <= kMaxLabelBytes && value.size() <= kMaxLabelBytes,
                 "a %zu-byte label accepted", std::max(name.size(), value.size()));
    }
  }
}

void check_rewritten(const WebhookMessage& message) {
  nlohmann::json alerts = nlohmann::json::array();
  for (const auto& alert : message.alerts) {
    alerts.push_back({{"status", alert.firing ? "firing" : "resolved"},
                      {"labels", alert.labels},
                      {"startsAt", alert.starts_at},
                      {"fingerprint", alert.fingerprint}});
  }
  std::string text;
  try {
    text = nlohmann::json{{"version", "4"}, {"receiver", message.receiver}, {"alerts", alerts}}
               .dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
  } catch (const nlohmann::json::type_error&) {
    return;  // the parser keeps any bytes its JSON held; invalid UTF-8 cannot be written back
  }
  const auto again = parse_alertmanager_webhook(text);
  FUZZ_CHECK(again.has_value(), "rewritten message refused: %s", again.error().c_str());
  FUZZ_CHECK(again->alerts.size() == message.alerts.size(), "rewritten message lost alerts");
  for (std::size_t i = 0; i < message.alerts.size(); ++i) {
    const auto& a = message.alerts[i];
    const auto& b = again->alerts[i];
    FUZZ_CHECK(a.firing == b.firing && a.labels == b.labels && a.starts_at == b.starts_at &&
                   a.fingerprint == b.fingerprint,
               "alert %zu parsed differently when written back", i);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto parsed = parse_alertmanager_webhook(ibprobe::fuzz::text(data, size));
  if (!parsed) return 0;
  check_bounds(*parsed);
  if (size < 64 * 1024) check_rewritten(*parsed);
  return 0;
}
