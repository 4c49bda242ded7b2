// Writes the sample incident's report (sample_incident.h) to the path given, for
// tests/integration/report_chromium.sh, which opens it in headless Chromium.
#include <cstdio>
#include <fstream>
#include <iostream>

#include "report/report.h"
#include "sample_incident.h"

int main(int argc, char** argv) {
  using namespace ithbat;
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " OUTPUT.html\n";
    return 2;
  }
  testutil::SyntheticFleet fleet;
  testutil::BuildSampleFleet(fleet);
  const auto view = fleet.TakeView();
  report::ReportOptions o;
  o.title = "Incident report: job 77 (sample)";
  o.from = testutil::kT0;
  o.to = testutil::kT0 + testutil::kSampleTicks * testutil::kS;
  o.generated_at = o.to + 60 * testutil::kS;
  o.source = "synthetic fleet (tests/report/sample_incident.h)";
  const std::string html = report::RenderReport(view, {testutil::SampleDiagnosis()}, o);
  std::ofstream out(argv[1], std::ios::binary | std::ios::trunc);
  out << html;
  out.close();
  if (!out) {
    std::cerr << "cannot write " << argv[1] << "\n";
    return 1;
  }
  std::cout << "wrote " << html.size() << " bytes to " << argv[1] << "\n";
  return 0;
}
