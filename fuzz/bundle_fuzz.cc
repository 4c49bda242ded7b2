// Evidence bundles arrive from other people (an SLA dispute, a support case): `ithbat diagnose
// FILE` and `ithbat report FILE` must turn any file into a diagnosis and a report, or a clear
// refusal — never a crash, a hang or unbounded memory. The first byte picks how the input
// becomes a file:
//   0  the rest of the input is the file, as is;
//   1  a valid bundle (written at start-up by WriteBundle) with the rest of the input written
//      over it at the offset its first four bytes give: SQLite's pages stay mostly valid, so
//      the mutations reach the values our reader interprets;
//   2  the same valid bundle changed by the rest of the input run as SQL (INSERT, UPDATE and
//      DELETE only, by an authorizer): rows no writer of ours would make.
// The file is read with ReadBundle; what reads is re-diagnosed (DiagnoseJob, as `diagnose`
// does) and drawn (RenderReport, as `report` does).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include <sqlite3.h>
#include <unistd.h>

#include "bundle/bundle.h"
#include "core/labels.h"
#include "core/metric.h"
#include "report/report.h"
#include "require.h"
#include "store/store.h"

namespace {

using ithbat::fuzz::Require;
constexpr ithbat::TimeNs kT0 = 1'700'000'000'000'000'000;

// The scratch directory of this process, in memory, removed at exit.
const std::string& Dir() {
  static const std::string dir = [] {
    std::string d = "/dev/shm/ithbat-bundle-fuzz-" + std::to_string(getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  static const bool cleaned_at_exit = [] {
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    });
    return true;
  }();
  (void)cleaned_at_exit;
  return dir;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  Require(out.good(), "the scratch file is written");
}

// A bundle of job 77 on two nodes: GPU series, a step counter, steps and events.
const std::string& Template() {
  static const std::string bytes = [] {
    using namespace ithbat;
    std::map<std::string, std::unique_ptr<store::Store>> stores;
    const MetricDesc gpu{"ithbat_gpu_utilization_ratio", "GPU busy", "ratio", MetricType::kGauge, {}};
    // The series that make a rank a process of the job (detect::DiscoverJobs).
    const MetricDesc launches{"ithbat_probe_launches_total", "Kernel launches", "", MetricType::kCounter, {}};
    for (const char* node : {"n1", "n2"}) {
      auto s = store::Store::Open(store::StoreOptions{});
      Require(s.has_value(), "store opens");
      for (const char* g : {"0", "1"}) {
        auto labels = LabelSet::From({{"gpu", g}, {"job_id", "77"}, {"rank", g}});
        Require(labels.has_value(), "labels");
        auto ref = (*s)->RegisterSeries(gpu, *labels);
        Require(ref.has_value(), "register");
        for (int i = 0; i < 30; ++i) (void)(*s)->Append(*ref, kT0 + i * kNsPerSec, i % 5 == 0 ? 0.2 : 0.95);
        auto rank =
            LabelSet::From({{"gpu", g}, {"job_id", "77"}, {"rank", g}, {"pid", std::string("40") + g}});
        Require(rank.has_value(), "labels");
        auto counter = (*s)->RegisterSeries(launches, *rank);
        Require(counter.has_value(), "register");
        for (int i = 0; i < 30; ++i) (void)(*s)->Append(*counter, kT0 + i * kNsPerSec, 1000.0 * i);
      }
      for (int i = 0; i < 10; ++i) {
        (void)(*s)->RecordStep("77", 0, StepSpan{i, kT0 + i * 3 * kNsPerSec, kT0 + (i + 1) * 3 * kNsPerSec});
        Event e;
        e.time = kT0 + i * 3 * kNsPerSec;
        e.kind = i == 4 ? EventKind::kCheckpointBegin : EventKind::kTrainMetric;
        e.source = "joblog";
        e.name = "loss";
        e.value = 2.5 - 0.1 * i;
        e.identity.job = "77";
        e.identity.node = node;
        e.identity.rank = 0;
        e.step = i;
        (void)(*s)->AppendEvent(std::move(e));
      }
      stores.emplace(node, std::move(*s));
    }
    const detect::FleetView view = detect::FleetView::Owning(std::move(stores));
    const std::string path = Dir() + "/template.ithbat";
    std::filesystem::remove(path);
    auto written =
        bundle::WriteBundle(view, bundle::RecordOptions{"77", kMinTime, kMaxTime, "fuzz", 3.5}, path);
    if (!written) std::fprintf(stderr, "template bundle: %s\n", written.error().message.c_str());
    Require(written.has_value(), "the template bundle is written");
    std::string b = ReadAll(path);
    std::filesystem::remove(path);
    return b;
  }();
  return bytes;
}

// Only row changes: no ATTACH (another file), no PRAGMA, no VACUUM INTO, no schema change.
int RowsOnly(void*, int action, const char*, const char*, const char*, const char*) {
  switch (action) {
    case SQLITE_INSERT:
    case SQLITE_UPDATE:
    case SQLITE_DELETE:
    case SQLITE_READ:
    case SQLITE_SELECT:
    case SQLITE_FUNCTION:
      return SQLITE_OK;
    default:
      return SQLITE_DENY;
  }
}

void RunSql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, nullptr) ==
      SQLITE_OK) {
    sqlite3_limit(db, SQLITE_LIMIT_ATTACHED, 0);
    sqlite3_limit(db, SQLITE_LIMIT_LENGTH, 1 << 20);
    sqlite3_set_authorizer(db, RowsOnly, nullptr);
    // A recursive CTE could run for ever: stop any statement after ~1M VM steps.
    sqlite3_progress_handler(
        db, 1 << 20, [](void*) { return 1; }, nullptr);
    sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
  }
  sqlite3_close_v2(db);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)Template();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ithbat;
  if (size < 1) return 0;
  const std::string path = Dir() + "/input.ithbat";
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      WriteAll(path, rest);
      break;
    case 1: {
      if (rest.size() < 4) return 0;
      std::string file = Template();
      uint32_t offset = 0;
      std::memcpy(&offset, rest.data(), 4);
      offset %= static_cast<uint32_t>(file.size());
      const std::string_view patch = rest.substr(4, file.size() - offset);
      file.replace(offset, patch.size(), patch);
      WriteAll(path, file);
      break;
    }
    default:
      WriteAll(path, Template());
      RunSql(path, std::string(rest));
      break;
  }
  auto b = bundle::ReadBundle(path);
  std::filesystem::remove(path);
  if (!b) {
    Require(!b.error().message.empty(), "a refusal says why");
    Require(b.error().message.size() <= 4096, "a refusal is one line, not the file");
    return 0;
  }
  Require(b->meta.from <= b->meta.to, "a bundle's window is a window");
  Require(std::isfinite(b->meta.list_price_per_gpu_hour) && b->meta.list_price_per_gpu_hour >= 0,
          "a list price is a price");
  Require(b->meta.nodes.size() == b->view.Nodes().size(), "one store per node");
  (void)bundle::DiagnoseJob(b->view, b->meta.job, b->meta.from, b->meta.to, b->meta.list_price_per_gpu_hour);
  report::ReportOptions ro;
  ro.title = "Job " + b->meta.job;
  ro.from = b->meta.from;
  ro.to = b->meta.to;
  ro.generated_at = b->meta.to;
  ro.source = b->meta.source;
  const std::string html = report::RenderReport(b->view, b->diagnoses, ro);
  Require(!html.empty(), "a report is drawn");
  return 0;
}
