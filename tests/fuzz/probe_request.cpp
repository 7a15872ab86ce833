// The probe API's request parsers: /probe query strings, async API JSON bodies and ?wait=
// durations. Whatever is accepted must be within the documented bounds and must survive being
// written out again (percent-encoded query, JSON) and parsed back unchanged.
#include "probe_request.h"

#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz.h"

namespace {

using namespace ibprobe::exporter;

std::string percent_encode(std::string_view text) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  for (const unsigned char c : text) {
    out += '%';
    out += kDigits[c >> 4];
    out += kDigits[c & 0xF];
  }
  return out;
}

std::string shortest(double value) {
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  FUZZ_CHECK(ec == std::errc(), "to_chars failed");
  return std::string(buffer, end);
}

void check_params(const ProbeParams& params, const char* source) {
  for (const std::string* value : {&params.target, &params.module}) {
    FUZZ_CHECK(!value->empty() && value->size() <= 512, "%s: a %zu-byte parameter accepted", source,
               value->size());
    for (const unsigned char c : *value) {
      FUZZ_CHECK(c >= 0x20 && c != 0x7f, "%s: control character 0x%02x accepted", source, c);
    }
  }
  if (params.timeout_seconds) {
    FUZZ_CHECK(std::isfinite(*params.timeout_seconds) && *params.timeout_seconds >= 0,
               "%s: timeout %g accepted", source, *params.timeout_seconds);
  }
}

bool same(const ProbeParams& a, const ProbeParams& b) {
  return a.target == b.target && a.module == b.module && a.debug == b.debug &&
         a.timeout_seconds == b.timeout_seconds;
}

// The same request as the other two forms of it the API takes.
void check_rewritten(const ProbeParams& params, bool from_query) {
  std::string query =
      "target=" + percent_encode(params.target) + "&module=" + percent_encode(params.module);
  if (from_query) query += params.debug ? "&debug=true" : "&debug=false";
  if (params.timeout_seconds)
    query += "&timeout=" + percent_encode(shortest(*params.timeout_seconds));
  const auto again = parse_probe_query(query);
  FUZZ_CHECK(again.has_value(), "rewritten query refused: %s", again.error().c_str());
  ProbeParams expected = params;
  if (!from_query) expected.debug = false;
  FUZZ_CHECK(same(again.value(), expected), "rewritten query parsed differently");

  nlohmann::json body = {{"target", params.target}, {"module", params.module}};
  if (params.timeout_seconds) body["timeout_seconds"] = *params.timeout_seconds;
  std::string text;
  try {
    text = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
  } catch (const nlohmann::json::type_error&) {
    return;  // a query may carry any bytes (%FF); JSON strings only UTF-8
  }
  const auto from_json = parse_probe_json(text);
  FUZZ_CHECK(from_json.has_value(), "rewritten JSON refused: %s", from_json.error().c_str());
  expected.debug = false;
  FUZZ_CHECK(same(from_json.value(), expected), "rewritten JSON parsed differently");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text = ibprobe::fuzz::text(data, size);

  const auto pairs = parse_query(text);
  if (const auto* map = (pairs ? &*pairs : nullptr)) {
    FUZZ_CHECK(map->size() <= 16, "%zu parameters accepted", map->size());
    std::string query;
    for (const auto& [name, value] : *map) {
      FUZZ_CHECK(!name.empty(), "empty parameter name accepted");
      query += (query.empty() ? "" : "&") + percent_encode(name) + "=" + percent_encode(value);
    }
    // Percent-encoding triples the length; the rewritten form only fits the limit when short.
    if (query.size() <= 4096) {
      const auto again = parse_query(query);
      FUZZ_CHECK(again.has_value() && *again == *map, "re-encoded query parsed differently");
    }
  }

  const auto query = parse_probe_query(text);
  if (const auto* params = (query ? &*query : nullptr)) {
    check_params(*params, "query");
    if (params->target.size() * 3 + params->module.size() * 3 < 3000) {
      check_rewritten(*params, true);
    }
  }

  const auto json = parse_probe_json(text);
  if (const auto* params = (json ? &*json : nullptr)) {
    check_params(*params, "json");
    if (params->target.size() * 3 + params->module.size() * 3 < 3000) {
      check_rewritten(*params, false);
    }
  }

  if (const auto wait = parse_wait_seconds(text)) {
    FUZZ_CHECK(std::isfinite(*wait) && *wait >= 0, "wait '%.*s' parsed as %g",
               static_cast<int>(text.size()), text.data(), *wait);
  }
  return 0;
}
