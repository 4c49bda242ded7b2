#pragma once
// Signal checks for the GPU and the job's own numbers: thermal_power, gpu_hardware, silent_data_corruption, no_learning, hang.
// Declared in signal_checks.h; the named thresholds they use are here.
#include "lab/signal_checks.h"

namespace ithbat::sim::lab {}  // namespace ithbat::sim::lab
