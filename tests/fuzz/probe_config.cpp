// The probe configuration file (YAML modules, limits, scheduler, allowed targets). A file that is
// accepted must keep every promise the exporter relies on afterwards: each module is a valid probe
// within the file's limits, the limits never exceed the built-in ceiling, and the allowlist is
// built exactly when targets are listed.
#include "probe_config.h"

#include "fuzz.h"

namespace {

using namespace ibprobe;
using namespace ibprobe::exporter;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto parsed = parse_probe_config(fuzz::text(data, size));
  const auto* config = (parsed ? &*parsed : nullptr);
  if (!config) {
    FUZZ_CHECK(!parsed.error().empty(), "refused without a reason");
    return 0;
  }
  const probes::Limits ceiling;
  const auto& limits = config->limits;
  FUZZ_CHECK(limits.max_message_size <= ceiling.max_message_size &&
                 limits.max_depth <= ceiling.max_depth && limits.max_qps <= ceiling.max_qps &&
                 limits.max_duration_seconds <= ceiling.max_duration_seconds &&
                 limits.max_iterations <= ceiling.max_iterations &&
                 limits.max_total_buffer_bytes <= ceiling.max_total_buffer_bytes,
             "limits widened past the built-in ceiling");
  FUZZ_CHECK(!config->modules.empty(), "accepted without modules");
  for (const auto& [name, module] : config->modules) {
    const auto valid = probes::validate(module.spec);
    FUZZ_CHECK(valid.has_value(), "module %s accepted but invalid: %s", name.c_str(),
               valid.error().message().c_str());
    const auto fits = probes::check_limits(module.spec, limits);
    FUZZ_CHECK(fits.has_value(), "module %s accepted over the limits: %s", name.c_str(),
               fits.error().message().c_str());
  }
  FUZZ_CHECK(
      config->queue_length <= 64 && config->history_length >= 1 && config->history_length <= 4096,
      "scheduler bounds: queue %zu history %zu", config->queue_length, config->history_length);
  FUZZ_CHECK((config->allowlist != nullptr) == !config->allowed_targets.empty(),
             "allowlist built for %zu targets", config->allowed_targets.size());
  return 0;
}
