#include "lab/checks_gpu.h"

#include <fmt/core.h>

#include "lab/check_util.h"

namespace ithbat::sim::lab {

FindingCheck CheckThermalPower(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
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

FindingCheck CheckGpuHardware(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
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

FindingCheck CheckSilentDataCorruption(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
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

FindingCheck CheckNoLearning(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
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

FindingCheck CheckHang(const World& world, const Evidence& evidence, const scenario::ResolvedScenario& resolved,
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
