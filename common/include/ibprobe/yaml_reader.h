// Reading the project's YAML files (probe modules, the mesh's peers, the web configuration) one
// way: every mistake names its line and column, a value is refused rather than guessed, and what
// yaml-cpp lets through silently (a repeated key, a key without a value) is refused too.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ibprobe::yaml {

// A mistake in a document; its text begins with where it is ("line L, column C: ").
class Error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The document in `text`; a syntax error throws Error with yaml-cpp's own text, which says
// "yaml-cpp: error at line L, column C".
YAML::Node load(std::string_view text);

// "line L, column C: ", or nothing for a node that is not in the document.
std::string where(const YAML::Node& node);
[[noreturn]] void fail(const YAML::Node& node, const std::string& what);

void require_map(const YAML::Node& node, const std::string& what);
// Refuses a key outside `known`, a key given twice (lookups would see only the first) and a key
// without a value (whose node marks the next token, so the error names the key).
void reject_unknown_keys(const YAML::Node& node, const std::string& what,
                         const std::set<std::string, std::less<>>& known);

std::string scalar(const YAML::Node& node, const std::string& field);
std::uint64_t unsigned_value(const YAML::Node& node, const std::string& field,
                             std::uint64_t max = std::numeric_limits<std::uint64_t>::max());
std::uint32_t u32(const YAML::Node& node, const std::string& field);
bool boolean(const YAML::Node& node, const std::string& field);
// Whole seconds from a Prometheus-style duration ("30s", "2m", "1h", or a bare number of
// seconds). "1500ms" is refused rather than rounded.
std::uint32_t seconds(const YAML::Node& node, const std::string& field);
double positive_number(const YAML::Node& node, const std::string& field, double max);

}  // namespace ibprobe::yaml
