// Alertmanager's webhook message as the alert receiver reads it: version 4, the contract of
// Alertmanager's notify/webhook/webhook.go (Message: version, groupKey, status, receiver,
// groupLabels, commonLabels, alerts[] with status, labels, annotations, startsAt, endsAt,
// generatorURL, fingerprint). Only what the receiver acts on is kept.
#pragma once

#include <cstddef>
#include <expected>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ibprobe::exporter {

struct WebhookAlert {
  bool firing = false;  // status "firing"; "resolved" otherwise
  std::map<std::string, std::string> labels;
  std::string starts_at;    // RFC 3339, as Alertmanager sent it
  std::string fingerprint;  // Alertmanager's hash of the labels: one per alert
};

struct WebhookMessage {
  std::string receiver;
  std::vector<WebhookAlert> alerts;
};

// Bounds on what one message may hold; Alertmanager's max_alerts caps alerts per message.
inline constexpr std::size_t kMaxWebhookBytes = 1 << 20;
inline constexpr std::size_t kMaxWebhookAlerts = 1000;
inline constexpr std::size_t kMaxAlertLabels = 64;
inline constexpr std::size_t kMaxLabelBytes = 1024;

// The message, or why it is not one (not JSON, another version, a field of the wrong type, a
// bound exceeded).
std::expected<WebhookMessage, std::string> parse_alertmanager_webhook(std::string_view body);

}  // namespace ibprobe::exporter
