#pragma once
// The scheduler's word that a job ended badly: a non-zero exit code or a signal in Slurm's epilog
// record (collect/slurm/). On its own it proves neither side — a job exits 1 for its own bug as
// often as because a GPU fell off the bus — so its finding is inconclusive with cause unknown,
// and the investigator files it under any other finding of the same job (whose diagnosis then
// says "it ended with exit code 1"). Alone, it is the diagnosis "job 42 crashed with exit code 1
// and nothing the engine collects explains it", which beats silence.
#include <vector>

#include "core/finding.h"
#include "detect/detector.h"

namespace ithbat::detect {

std::vector<Finding> DetectJobEnds(const DetectInput& in);

}  // namespace ithbat::detect
