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
  try {
    for (const auto& [guid, name] : parse_node_name_map(text)) {
      FUZZ_CHECK(!name.empty() && name.find('\n') == std::string::npos,
                 "name of GUID %llx is empty or spans lines",
                 static_cast<unsigned long long>(guid));
    }
  } catch (const std::invalid_argument& e) {
    FUZZ_CHECK(std::string(e.what()).starts_with("line "), "refusal without a line: %s", e.what());
  }
  return 0;
}
