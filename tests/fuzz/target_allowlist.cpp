// The probe target allowlist: entries one per line, then the hosts those entries name. Whatever
// an accepted list contains must allow what it names - the address of an address entry, the
// network address of a CIDR, the name of a name entry, a name under a wildcard - and a list of
// names alone must never send a host to the resolver.
#include "target_allowlist.h"

#include <string>
#include <vector>

#include "fuzz.h"

namespace {

using namespace ibprobe::exporter;

std::expected<std::vector<TargetAllowlist::Address>, std::string> no_dns(const std::string&) {
  return std::unexpected(std::string("no resolver in this test"));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> entries;
  std::string_view text = ibprobe::fuzz::text(data, size);
  while (!text.empty() && entries.size() < 16) {
    const auto end = std::min(text.find('\n'), text.size());
    entries.emplace_back(text.substr(0, end));
    text.remove_prefix(std::min(end + 1, text.size()));
  }
  const auto parsed = TargetAllowlist::parse(entries);
  if (!parsed) return 0;
  const TargetAllowlist* list = &*parsed;
  FUZZ_CHECK(list->allows_everything() == entries.empty(), "%zu entries, allows everything: %d",
             entries.size(), list->allows_everything());
  for (const auto& entry : entries) {
    std::string host = entry.substr(0, entry.find('/'));
    if (host.starts_with("*.")) host = "fuzz" + host.substr(1);
    const auto admitted = list->admit(host, no_dns);
    FUZZ_CHECK(admitted.has_value(), "entry '%s' does not allow '%s': %s", entry.c_str(),
               host.c_str(), admitted.error().c_str());
  }
  // Any other host, resolved by a resolver that knows nothing: refused, never a crash.
  for (const auto& host : {std::string(text), std::string("fuzz.invalid"), std::string("::1")}) {
    (void)list->admit(host, no_dns);
  }
  return 0;
}
