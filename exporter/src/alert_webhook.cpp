#include "alert_webhook.h"

#include <nlohmann/json.hpp>

namespace ibprobe::exporter {
namespace {

using nlohmann::json;

std::expected<std::string, std::string> text(const json& object, const char* key,
                                             const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end()) return std::unexpected(where + " has no " + key);
  if (!it->is_string()) return std::unexpected(where + "." + key + " must be a string");
  auto value = it->get<std::string>();
  if (value.size() > kMaxLabelBytes) {
    return std::unexpected(where + "." + key + " is longer than " + std::to_string(kMaxLabelBytes) +
                           " bytes");
  }
  return value;
}

std::expected<WebhookAlert, std::string> alert_from(const json& in, const std::string& where) {
  if (!in.is_object()) return std::unexpected(where + " must be an object");
  WebhookAlert alert;
  const auto status = text(in, "status", where);
  if (!status) return std::unexpected(status.error());
  if (*status != "firing" && *status != "resolved") {
    return std::unexpected(where + ".status is '" + *status + "', not firing or resolved");
  }
  alert.firing = *status == "firing";
  const auto labels = in.find("labels");
  if (labels == in.end() || !labels->is_object()) {
    return std::unexpected(where + ".labels must be an object");
  }
  if (labels->size() > kMaxAlertLabels) {
    return std::unexpected(where + " has more than " + std::to_string(kMaxAlertLabels) + " labels");
  }
  for (const auto& [name, value] : labels->items()) {
    if (!value.is_string() || name.size() > kMaxLabelBytes ||
        value.get_ref<const std::string&>().size() > kMaxLabelBytes) {
      return std::unexpected(where + ".labels." + name.substr(0, 64) +
                             " must be a string of at most " + std::to_string(kMaxLabelBytes) +
                             " bytes");
    }
    alert.labels.emplace(name, value.get<std::string>());
  }
  auto starts_at = text(in, "startsAt", where);
  if (!starts_at) return std::unexpected(starts_at.error());
  alert.starts_at = std::move(*starts_at);
  auto fingerprint = text(in, "fingerprint", where);
  if (!fingerprint) return std::unexpected(fingerprint.error());
  if (fingerprint->empty()) return std::unexpected(where + ".fingerprint is empty");
  alert.fingerprint = std::move(*fingerprint);
  return alert;
}

}  // namespace

std::expected<WebhookMessage, std::string> parse_alertmanager_webhook(std::string_view body) {
  if (body.size() > kMaxWebhookBytes) {
    return std::unexpected("the message is longer than " + std::to_string(kMaxWebhookBytes) +
                           " bytes");
  }
  const json in = json::parse(body, nullptr, false);
  if (in.is_discarded()) return std::unexpected(std::string("the message is not valid JSON"));
  if (!in.is_object()) return std::unexpected(std::string("the message must be a JSON object"));
  const auto version = text(in, "version", "the message");
  if (!version) return std::unexpected(version.error());
  if (*version != "4") {
    return std::unexpected("webhook message version '" + *version +
                           "': this receiver reads Alertmanager's version 4");
  }
  WebhookMessage message;
  if (const auto receiver = in.find("receiver"); receiver != in.end() && receiver->is_string()) {
    message.receiver = receiver->get<std::string>().substr(0, kMaxLabelBytes);
  }
  const auto alerts = in.find("alerts");
  if (alerts == in.end() || !alerts->is_array()) {
    return std::unexpected(std::string("the message's alerts must be an array"));
  }
  if (alerts->size() > kMaxWebhookAlerts) {
    return std::unexpected("the message holds " + std::to_string(alerts->size()) +
                           " alerts, more than " + std::to_string(kMaxWebhookAlerts));
  }
  for (std::size_t i = 0; i < alerts->size(); ++i) {
    auto alert = alert_from((*alerts)[i], "alerts[" + std::to_string(i) + "]");
    if (!alert) return std::unexpected(alert.error());
    message.alerts.push_back(std::move(*alert));
  }
  return message;
}

}  // namespace ibprobe::exporter
