#include "ibprobe/yaml_reader.h"

#include <fmt/format.h>

#include <charconv>

namespace ibprobe::yaml {

YAML::Node load(std::string_view text) {
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    throw Error(e.what());
  }
}

std::string where(const YAML::Node& node) {
  const auto mark = node.Mark();
  if (mark.line < 0) return "";
  return "line " + std::to_string(mark.line + 1) + ", column " + std::to_string(mark.column + 1) +
         ": ";
}

void fail(const YAML::Node& node, const std::string& what) {
  throw Error(where(node) + what);
}

void require_map(const YAML::Node& node, const std::string& what) {
  if (!node.IsMap()) fail(node, what + " must be a mapping");
}

void reject_unknown_keys(const YAML::Node& node, const std::string& what,
                         const std::set<std::string, std::less<>>& known) {
  std::set<std::string, std::less<>> seen;
  for (const auto& entry : node) {
    const auto key = scalar(entry.first, "a key");
    if (!known.contains(key)) fail(entry.first, "unknown field '" + key + "' in " + what);
    if (!seen.insert(key).second) fail(entry.first, key + " is given twice in " + what);
    if (entry.second.IsNull()) fail(entry.first, key + " in " + what + " has no value");
  }
}

std::string scalar(const YAML::Node& node, const std::string& field) {
  if (!node.IsScalar()) fail(node, field + " must be a single value");
  return node.Scalar();
}

std::uint64_t unsigned_value(const YAML::Node& node, const std::string& field, std::uint64_t max) {
  const auto text = scalar(node, field);
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    fail(node, field + " must be a non-negative integer, not '" + text + "'");
  }
  if (value > max) {
    fail(node, field + " " + text + " is above its maximum " + std::to_string(max));
  }
  return value;
}

std::uint32_t u32(const YAML::Node& node, const std::string& field) {
  return static_cast<std::uint32_t>(
      unsigned_value(node, field, std::numeric_limits<std::uint32_t>::max()));
}

bool boolean(const YAML::Node& node, const std::string& field) {
  const auto text = scalar(node, field);
  if (text == "true") return true;
  if (text == "false") return false;
  fail(node, field + " must be true or false, not '" + text + "'");
}

std::uint32_t seconds(const YAML::Node& node, const std::string& field) {
  const auto text = scalar(node, field);
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  const std::string_view unit(end, text.data() + text.size() - end);
  std::uint64_t factor = 0;
  if (unit.empty() || unit == "s") factor = 1;
  if (unit == "m") factor = 60;
  if (unit == "h") factor = 3600;
  if (ec != std::errc() || end == text.data() || factor == 0) {
    fail(node,
         field + " must be a duration in whole seconds such as 30s, 2m or 1h, not '" + text + "'");
  }
  if (value > std::numeric_limits<std::uint32_t>::max() / factor) {
    fail(node, field + " '" + text + "' is too long");
  }
  return static_cast<std::uint32_t>(value * factor);
}

double positive_number(const YAML::Node& node, const std::string& field, double max) {
  const auto text = scalar(node, field);
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || !(value > 0) || value > max) {
    fail(node, field + " must be a number above 0 and at most " + fmt::format("{}", max) +
                   ", not '" + text + "'");
  }
  return value;
}

}  // namespace ibprobe::yaml
