#pragma once
// The commands around diagnoses and their proof (docs/bundles.md, docs/diagnoses.md):
//   ithbat record --job ID -o FILE.ithbat (--data-dir [NODE=]DIR | --agent [NODE=]HOST:PORT)...
//       copies the job's window from stopped agents' data directories or from running agents
//       into one evidence bundle, with the diagnoses the engine makes of it;
//   ithbat diagnose FILE.ithbat | --agent HOST:PORT... | --hub HOST:PORT  [--json] [--color]
//       re-diagnoses a bundle offline (and says whether it agrees with what was recorded), or
//       prints what running agents or a hub diagnose now;
//   ithbat report FILE.ithbat -o FILE.html
//       the self-contained HTML report of a bundle (src/report).
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace ithbat::cli {

struct RecordCommandOptions {
  std::string job;
  std::string output;
  std::vector<std::string> data_dirs;  // [NODE=]DIR
  std::vector<std::string> agents;     // [NODE=]HOST:PORT
  std::string agent_token_file;
  std::string from, to;  // RFC 3339 or Unix seconds
  std::string window;    // a duration ending at --to (or now / the newest data)
  double list_price = 0;
};

struct DiagnoseCommandOptions {
  std::string bundle;
  std::vector<std::string> agents;  // HOST:PORT
  std::string hub;                  // HOST:PORT
  std::string token_file;
  bool json = false;
  std::string color = "auto";  // auto | always | never
};

struct ReportCommandOptions {
  std::string bundle;
  std::string output;
};

struct EvidenceCommands {
  RecordCommandOptions record;
  DiagnoseCommandOptions diagnose;
  ReportCommandOptions report;
  CLI::App* record_cmd = nullptr;
  CLI::App* diagnose_cmd = nullptr;
  CLI::App* report_cmd = nullptr;
};

void AddEvidenceCommands(CLI::App& app, EvidenceCommands& st);
// The exit code of the evidence command that was parsed, or -1 when none of them was.
int RunEvidenceCommand(const EvidenceCommands& st, std::FILE* out, std::FILE* err);

// Exit codes: 0 done; 1 a source could not be read or a file written; 2 usage; 3 (diagnose FILE)
// the offline re-diagnosis differs from the diagnoses recorded in the bundle.
int RunRecordCommand(const RecordCommandOptions& o, std::FILE* out, std::FILE* err);
int RunDiagnoseCommand(const DiagnoseCommandOptions& o, std::FILE* out, std::FILE* err);
int RunReportCommand(const ReportCommandOptions& o, std::FILE* out, std::FILE* err);

}  // namespace ithbat::cli
