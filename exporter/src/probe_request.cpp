#include "probe_request.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>

namespace ibprobe::exporter {
namespace {

constexpr std::size_t kMaxQueryBytes = 4096;
constexpr std::size_t kMaxParameters = 16;
constexpr std::size_t kMaxValueBytes = 512;
constexpr std::size_t kMaxBodyBytes = 16 * 1024;

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::string> url_decode(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '+') {
      out += ' ';
    } else if (text[i] == '%') {
      if (i + 2 >= text.size()) return std::nullopt;
      const int high = hex_digit(text[i + 1]), low = hex_digit(text[i + 2]);
      if (high < 0 || low < 0) return std::nullopt;
      out += static_cast<char>(high * 16 + low);
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

std::optional<double> parse_seconds_number(std::string_view text) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value) || value < 0) {
    return std::nullopt;
  }
  return value;
}

// The lane's fields, one spelling for /probe and the API (and the spec's).
std::optional<std::uint32_t>* lane_field(ProbeParams& params, std::string_view name) {
  if (name == "sl") return &params.sl;
  if (name == "traffic_class") return &params.traffic_class;
  if (name == "pkey_index") return &params.pkey_index;
  if (name == "dlid") return &params.dlid;
  return nullptr;
}

// A decimal number that fits 32 bits; its range is the spec's to check.
std::expected<std::uint32_t, std::string> lane_number(std::string_view name,
                                                      std::string_view text) {
  std::uint32_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return std::unexpected(std::string(name) + " '" + std::string(text) +
                           "' is not a whole number");
  }
  return value;
}

bool printable(const std::string& value) {
  for (const unsigned char c : value) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

std::expected<ProbeParams, std::string> check(ProbeParams params) {
  for (const auto* value : {&params.target, &params.module}) {
    if (value->size() > kMaxValueBytes) {
      return std::unexpected("a parameter is longer than " + std::to_string(kMaxValueBytes) +
                             " bytes");
    }
    if (!printable(*value))
      return std::unexpected(std::string("parameters must not hold control characters"));
  }
  if (params.target.empty())
    return std::unexpected(std::string("target is missing: give target=HOST:PORT"));
  if (params.module.empty())
    return std::unexpected(std::string("module is missing: give module=NAME"));
  return params;
}

}  // namespace

std::expected<std::map<std::string, std::string>, std::string> parse_query(std::string_view query) {
  if (query.size() > kMaxQueryBytes) {
    return std::unexpected("query string longer than " + std::to_string(kMaxQueryBytes) + " bytes");
  }
  std::map<std::string, std::string> out;
  std::size_t start = 0;
  while (start <= query.size() && !query.empty()) {
    const auto end = std::min(query.find('&', start), query.size());
    const auto pair = query.substr(start, end - start);
    start = end + 1;
    if (pair.empty()) continue;
    const auto equals = pair.find('=');
    const auto name = url_decode(pair.substr(0, equals));
    const auto value = url_decode(equals == std::string_view::npos ? "" : pair.substr(equals + 1));
    if (!name || !value)
      return std::unexpected(std::string("malformed %-escape in the query string"));
    if (name->empty()) return std::unexpected(std::string("query parameter without a name"));
    if (out.size() >= kMaxParameters) {
      return std::unexpected("more than " + std::to_string(kMaxParameters) + " query parameters");
    }
    if (!out.emplace(*name, *value).second) {
      return std::unexpected("parameter '" + *name + "' is given more than once");
    }
  }
  return out;
}

std::expected<ProbeParams, std::string> parse_probe_query(std::string_view query) {
  auto parsed = parse_query(query);
  if (!parsed) return std::unexpected(parsed.error());
  ProbeParams params;
  for (const auto& [name, value] : parsed.value()) {
    if (name == "target") {
      params.target = value;
    } else if (name == "module") {
      params.module = value;
    } else if (name == "debug") {
      if (value != "true" && value != "false")
        return std::unexpected("debug must be true or false");
      params.debug = value == "true";
    } else if (name == "timeout") {
      params.timeout_seconds = parse_wait_seconds(value);
      if (!params.timeout_seconds)
        return std::unexpected("timeout '" + value + "' is not a duration");
    } else if (auto* lane = lane_field(params, name)) {
      const auto number = lane_number(name, value);
      if (!number) return std::unexpected(number.error());
      *lane = *number;
    } else {
      return std::unexpected("unknown parameter '" + name +
                             "' (known: target, module, debug, timeout, sl, traffic_class, "
                             "pkey_index, dlid)");
    }
  }
  return check(std::move(params));
}

std::expected<ProbeParams, std::string> parse_probe_json(std::string_view body) {
  if (body.size() > kMaxBodyBytes) {
    return std::unexpected("request body longer than " + std::to_string(kMaxBodyBytes) + " bytes");
  }
  // nlohmann keeps the last of repeated keys; like a repeated query parameter, refuse them.
  std::set<std::string> seen;
  std::string repeated;
  const auto json = nlohmann::json::parse(
      body,
      [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        if (event == nlohmann::json::parse_event_t::key && depth == 1 &&
            !seen.insert(parsed.get<std::string>()).second && repeated.empty()) {
          repeated = parsed.get<std::string>();
        }
        return true;
      },
      false);
  if (json.is_discarded()) return std::unexpected(std::string("the body is not valid JSON"));
  if (!repeated.empty()) return std::unexpected("field '" + repeated + "' is given more than once");
  if (!json.is_object()) return std::unexpected(std::string("the body must be a JSON object"));
  ProbeParams params;
  for (const auto& [name, value] : json.items()) {
    if (name == "target" || name == "module") {
      if (!value.is_string()) return std::unexpected(name + " must be a string");
      (name == "target" ? params.target : params.module) = value.get<std::string>();
    } else if (name == "timeout_seconds") {
      if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < 0) {
        return std::unexpected(std::string("timeout_seconds must be a non-negative number"));
      }
      params.timeout_seconds = value.get<double>();
    } else if (auto* lane = lane_field(params, name)) {
      if (!value.is_number_unsigned() || value.get<std::uint64_t>() > UINT32_MAX) {
        return std::unexpected(name + " must be a whole number");
      }
      *lane = value.get<std::uint32_t>();
    } else {
      return std::unexpected("unknown field '" + name +
                             "' (known: target, module, timeout_seconds, sl, traffic_class, "
                             "pkey_index, dlid)");
    }
  }
  return check(std::move(params));
}

std::optional<double> parse_wait_seconds(std::string_view text) {
  double factor = 1;
  if (text.ends_with("ms")) {
    factor = 1e-3;
    text.remove_suffix(2);
  } else if (text.ends_with("s")) {
    text.remove_suffix(1);
  } else if (text.ends_with("m")) {
    factor = 60;
    text.remove_suffix(1);
  }
  const auto value = parse_seconds_number(text);
  // Finite before scaling is not enough: "1e308m" overflows to infinity.
  if (!value || !std::isfinite(*value * factor)) return std::nullopt;
  return *value * factor;
}

std::expected<std::optional<double>, std::string> scrape_budget_seconds(
    const std::map<std::string, std::string>& headers) {
  constexpr double kScrapeTimeoutOffset = 0.5;
  const auto header = headers.find("x-prometheus-scrape-timeout-seconds");
  if (header == headers.end()) return std::nullopt;
  const auto scrape = parse_wait_seconds(header->second);
  if (!scrape) {
    return std::unexpected("X-Prometheus-Scrape-Timeout-Seconds '" + header->second +
                           "' is not a number of seconds");
  }
  return *scrape - kScrapeTimeoutOffset;
}

}  // namespace ibprobe::exporter
