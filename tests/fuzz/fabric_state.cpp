// The state file (--fabric.state-file), read at start from a disk that may hold anything. A
// refusal is kStateFile with a reason; an accepted state writes back to text that reads back to
// the same text (integers in range, no field lost).
#include "fabric_state.h"

#include <string>

#include "fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ibprobe::fabric;
  const auto state = fabric_state_from_json(ibprobe::fuzz::text(data, size));
  if (!state) {
    FUZZ_CHECK(state.error().kind == ErrorKind::kStateFile && !state.error().message.empty(),
               "refusal without kind or reason: %s", state.error().message.c_str());
    return 0;
  }
  // Written once, the text is what the exporter writes: it reads back and writes the same.
  const auto written = fabric_state_to_json(state->model, state->history);
  const auto reread = fabric_state_from_json(written);
  FUZZ_CHECK(reread.has_value(), "its own state refused: %s", reread.error().message.c_str());
  const auto rewritten = fabric_state_to_json(reread->model, reread->history);
  FUZZ_CHECK(rewritten == written, "state changed on a round trip:\n%s\n%s", written.c_str(),
             rewritten.c_str());
  return 0;
}
