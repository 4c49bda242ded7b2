#pragma once
// Reads the OpenMetrics text that ../shared/bench/gen-gpu-node.py writes (one family at a
// time, every sample of a series in time order) into memory, so benchmarks measure the store
// and not the parser. Bench-only: it trusts its input and stops at the first malformed line.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/metric.h"
#include "store/chunk.h"

namespace ithbat::bench {

struct BenchSeries {
  MetricDesc desc;
  std::vector<std::pair<std::string, std::string>> labels;
  std::vector<store::Sample> samples;
};

struct BenchData {
  std::vector<BenchSeries> series;
  size_t total_samples = 0;
  std::string error;
};

inline BenchData ReadOpenMetrics(const std::string& path) {
  BenchData data;
  std::ifstream in(path);
  if (!in) {
    data.error = "cannot open " + path;
    return data;
  }
  std::map<std::string, MetricDesc> descs;  // family name → desc (help/type)
  std::map<std::string, size_t> index;      // full series text → position
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("# EOF")) break;
    if (line.starts_with("# TYPE ") || line.starts_with("# HELP ")) {
      auto rest = line.substr(7);
      auto sp = rest.find(' ');
      std::string name = rest.substr(0, sp);
      auto& d = descs[name];
      d.name = name;
      if (line[2] == 'T') d.type = rest.substr(sp + 1) == "counter" ? MetricType::kCounter : MetricType::kGauge;
      else d.help = rest.substr(sp + 1);
      continue;
    }
    auto brace = line.find('{');
    auto close = line.rfind('}');
    if (brace == std::string::npos || close == std::string::npos) break;
    std::string key = line.substr(0, close + 1);
    auto it = index.find(key);
    if (it == index.end()) {
      BenchSeries s;
      std::string sample_name = line.substr(0, brace);
      std::string family = sample_name;
      if (sample_name.ends_with("_total") && !descs.count(family)) family.resize(family.size() - 6);
      s.desc = descs[family];
      s.desc.name = sample_name;
      if (s.desc.help.empty()) s.desc.help = sample_name;
      // Units by suffix, so names pass the store's naming rules.
      for (const char* unit : {"percent", "ratio", "milliwatts", "millijoules", "celsius", "mhz", "bytes", "us",
                               "kilobytes_per_second", "per_sec", "banks"}) {
        std::string base = sample_name;
        if (base.ends_with("_total")) base.resize(base.size() - 6);
        if (base.ends_with(std::string("_") + unit)) s.desc.unit = unit;
      }
      std::string body = line.substr(brace + 1, close - brace - 1);
      size_t pos = 0;
      while (pos < body.size()) {
        auto eq = body.find('=', pos);
        auto q1 = body.find('"', eq);
        auto q2 = body.find('"', q1 + 1);
        s.labels.emplace_back(body.substr(pos, eq - pos), body.substr(q1 + 1, q2 - q1 - 1));
        pos = q2 + 2;
      }
      index.emplace(key, data.series.size());
      data.series.push_back(std::move(s));
      it = index.find(key);
    }
    const char* p = line.data() + close + 2;
    const char* end = line.data() + line.size();
    double v = 0, ts = 0;
    auto r1 = std::from_chars(p, end, v);
    if (r1.ec != std::errc()) {
      // repr() of Python floats: nan, inf
      std::string word(p, std::find(p, end, ' '));
      v = word == "nan" ? std::nan("") : word == "inf" ? INFINITY : word == "-inf" ? -INFINITY : 0;
      r1.ptr = p + word.size();
    }
    std::from_chars(r1.ptr + 1, end, ts);
    data.series[it->second].samples.push_back({static_cast<TimeNs>(std::llround(ts * 1e3)) * kNsPerMs, v});
    ++data.total_samples;
  }
  return data;
}

}  // namespace ithbat::bench
