// The host's collectors as the configuration asks for them.
#pragma once

#include <memory>
#include <vector>

#include "ibprobe/collectors.h"
#include "ibprobe/exporter.h"

namespace ibprobe::exporter {

// One of each collector config.enabled_collectors names, built with the options the flags gave.
std::vector<std::unique_ptr<collectors::Collector>> make_host_collectors(const Config& config);

}  // namespace ibprobe::exporter
