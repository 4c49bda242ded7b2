#include "detect/registry.h"

#include <array>

#include "detect/gpu/hardware_faults.h"
#include "detect/hang/hang.h"
#include "detect/hang/watchdog.h"
#include "detect/inference/efficiency.h"
#include "detect/memory/out_of_memory.h"
#include "detect/network/network.h"
#include "detect/numerics/divergence.h"
#include "detect/numerics/no_learning.h"
#include "detect/scheduler/job_end.h"
#include "detect/stalls/stalls.h"
#include "detect/stragglers/stragglers.h"

namespace ithbat::detect {

std::span<const DetectorInfo> RegisteredDetectors() {
  static const std::array kAll{
      // job
      DetectorInfo{"divergence", "numerics", &DetectDivergence},
      DetectorInfo{"no_learning", "numerics", &DetectNoLearning},
      DetectorInfo{"hang", "hang", &DetectHang},
      DetectorInfo{"watchdog", "hang", &DetectWatchdogTimeouts},
      DetectorInfo{"out_of_memory", "memory", &DetectOutOfMemory},
      DetectorInfo{"stragglers", "stragglers", &DetectStragglers},
      DetectorInfo{"inference_efficiency", "inference", &DetectInferenceEfficiency},
      // the scheduler's word on how a job ended (filed under the job's other findings)
      DetectorInfo{"job_end", "scheduler", &DetectJobEnds},
      // node
      DetectorInfo{"hardware_faults", "gpu", &DetectHardwareFaults},
      // network
      DetectorInfo{"network", "network", &DetectNetwork},
      // storage
      DetectorInfo{"stalls", "stalls", &DetectStalls},
  };
  return kAll;
}

}  // namespace ithbat::detect
