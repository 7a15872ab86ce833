// The fabric's text parsers: switch GUIDs from /fabric?target= (untrusted) and the
// --fabric.node-name-map file. An accepted GUID prints back (sysfs form) to text that parses to
// the same GUID; a map either parses into GUIDs with non-empty single-line names or is refused
// with std::invalid_argument naming a line.
#include <stdexcept>
#include <string>

#include "fuzz.h"
#include "ibprobe/fabric.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ibprobe::fabric;
  const auto text = ibprobe::fuzz::text(data, size);
  if (const auto guid = parse_guid(text)) {
    const auto printed = format_guid(*guid);
    FUZZ_CHECK(parse_guid(printed) == guid, "GUID %s did not round-trip", printed.c_str());
  }
  const auto entries = parse_node_name_map(text);
  if (!entries) {
    const auto& why = entries.error().message;
    FUZZ_CHECK(why.starts_with("line "), "refusal without a line: %s", why.c_str());
    return 0;
  }
  for (const auto& [guid, name] : *entries) {
    FUZZ_CHECK(!name.empty() && name.find('\n') == std::string::npos,
               "name of GUID %llx is empty or spans lines", static_cast<unsigned long long>(guid));
  }
  return 0;
}
