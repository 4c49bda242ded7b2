#include "lab/checks_host_fabric.h"

#include <fmt/core.h>

#include "lab/check_util.h"

namespace ithbat::sim::lab {

FindingCheck CheckNetwork(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                     const scenario::ExpectedFinding& f) {
  (void)world;
  (void)evidence;
  (void)resolved;
  FindingCheck c;
  c.expected = Describe(f);
  c.skipped = true;
  c.skip_reason = "check not written yet";
  return c;
}

FindingCheck CheckHostBottleneck(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                     const scenario::ExpectedFinding& f) {
  (void)world;
  (void)evidence;
  (void)resolved;
  FindingCheck c;
  c.expected = Describe(f);
  c.skipped = true;
  c.skip_reason = "check not written yet";
  return c;
}

FindingCheck CheckInputPipeline(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
                     const scenario::ExpectedFinding& f) {
  (void)world;
  (void)evidence;
  (void)resolved;
  FindingCheck c;
  c.expected = Describe(f);
  c.skipped = true;
  c.skip_reason = "check not written yet";
  return c;
}

}  // namespace ithbat::sim::lab
