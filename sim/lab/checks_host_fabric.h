#pragma once
// Signal checks for the host, the input pipeline and the fabric: network, host_bottleneck, input_pipeline.
// Declared in signal_checks.h; the named thresholds they use are here.
#include "lab/signal_checks.h"

namespace ithbat::sim::lab {}  // namespace ithbat::sim::lab
