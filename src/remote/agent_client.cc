#include "remote/agent_client.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/event.h"
#include "core/labels.h"
#include "core/metric.h"
#include "investigate/diagnosis_json.h"
#include "net/http_client.h"

namespace ithbat::remote {
namespace {

using nlohmann::json;

// The agent's largest events page (docs/http-api.md: limit 1 … 10 000; the newest win).
constexpr size_t kEventsPerPage = 10'000;
// Splitting a window in halves more often than this is not a split any more but a loop.
constexpr int kMaxSplitDepth = 40;
constexpr size_t kMaxQuotedError = 240;
// Every series of every metric, as one selector.
const std::string kEverySeries = R"({__name__=~".+"})";

std::string Cut(std::string_view text, size_t n = kMaxQuotedError) {
  if (text.size() <= n) return std::string(text);
  return fmt::format("{}…", text.substr(0, n));
}

// A query's parameters in the order sent.
using Params = std::vector<std::pair<std::string, std::string>>;

using HttpAnswer = AgentAnswer;

// The message of the agent's JSON error body, or the start of whatever it sent.
std::string ErrorMessage(const HttpAnswer& a) {
  try {
    json j = json::parse(a.body);
    if (j.is_object() && j.contains("error") && j["error"].is_object() && j["error"].contains("message") &&
        j["error"]["message"].is_string()) {
      return Cut(j["error"]["message"].get<std::string>());
    }
  } catch (const std::exception&) {
  }
  return a.body.empty() ? std::string("(no body)") : Cut(a.body);
}

Result<MetricType> ParseMetricType(std::string_view s) {
  if (s == "gauge") return MetricType::kGauge;
  if (s == "counter") return MetricType::kCounter;
  return MakeErrorF(ErrorCode::kParse, "unknown metric type '{}'", Cut(s, 32));
}

// A string member, or "" when it is absent or not a string. json::value() would throw on a
// member of another type, and an agent's answer may hold anything.
std::string StringMember(const json& o, const char* key) {
  if (!o.is_object()) return std::string();
  auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
}
bool TrueMember(const json& o, const char* key) {
  if (!o.is_object()) return false;
  auto it = o.find(key);
  return it != o.end() && it->is_boolean() && it->get<bool>();
}

// Optional typed members of an event object; a member of the wrong type is an error.
Result<std::string> OptString(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return std::string();
  if (!it->is_string()) return MakeErrorF(ErrorCode::kParse, "'{}' is not a string", key);
  return it->get<std::string>();
}
Result<int64_t> OptInt(const json& o, const char* key, int64_t absent) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return absent;
  if (!it->is_number_integer()) return MakeErrorF(ErrorCode::kParse, "'{}' is not an integer", key);
  return it->get<int64_t>();
}
int32_t Narrow(int64_t v) {
  return v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()
             ? -1
             : static_cast<int32_t>(v);
}

// One element of /api/v1/events as the agent writes it (serve/api.cc EventJson).
Result<Event> EventFromJson(const json& j) {
  if (!j.is_object()) return MakeError(ErrorCode::kParse, "an event is not an object");
  Event e;
  auto t = OptInt(j, "time_unix_ns", INT64_MIN);
  if (!t) return std::unexpected(t.error());
  if (*t == INT64_MIN) return MakeError(ErrorCode::kParse, "an event has no time_unix_ns");
  e.time = *t;
  auto kind_text = OptString(j, "kind");
  if (!kind_text) return std::unexpected(kind_text.error());
  auto kind = ParseEventKind(*kind_text);
  if (!kind) return MakeErrorF(ErrorCode::kParse, "unknown event kind '{}'", Cut(*kind_text, 32));
  e.kind = *kind;
  Identity& id = e.identity;
  for (auto [key, target] :
       {std::pair{"cluster", &id.cluster}, std::pair{"node", &id.node}, std::pair{"job", &id.job},
        std::pair{"gpu_uuid", &id.gpu_uuid}, std::pair{"source", &e.source}, std::pair{"name", &e.name},
        std::pair{"text", &e.text}}) {
    auto v = OptString(j, key);
    if (!v) return std::unexpected(v.error());
    *target = std::move(*v);
  }
  for (auto [key, target] : {std::pair{"rank", &id.rank}, std::pair{"local_rank", &id.local_rank},
                             std::pair{"world_size", &id.world_size}, std::pair{"pid", &id.pid},
                             std::pair{"gpu", &id.gpu_index}}) {
    auto v = OptInt(j, key, -1);
    if (!v) return std::unexpected(v.error());
    *target = Narrow(*v);
  }
  auto step = OptInt(j, "step", -1);
  if (!step) return std::unexpected(step.error());
  e.step = *step;
  if (auto it = j.find("value"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) return MakeError(ErrorCode::kParse, "an event's 'value' is not a string");
    auto v = ParseSampleValue(it->get_ref<const std::string&>());
    if (!v) return std::unexpected(v.error());
    e.value = *v;
  }
  if (auto it = j.find("attrs"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return MakeError(ErrorCode::kParse, "an event's 'attrs' is not an object");
    for (const auto& [k, v] : it->items()) {
      if (!v.is_string()) return MakeError(ErrorCode::kParse, "an event attribute is not a string");
      e.attrs.emplace_back(k, v.get<std::string>());
    }
  }
  return e;
}

// /api/v1/series answers are read with a SAX parser: a sample's time is a JSON number with up
// to nine decimals, which a double would round (a present-day time in ns needs 61 bits), and a
// tree of a large answer would cost ~10x its text in memory. Each series is handed over when
// its object closes.
struct PulledSeries {
  std::string metric;
  std::vector<std::pair<std::string, std::string>> labels;
  std::vector<store::Sample> samples;
};

class SeriesSax {
 public:
  using OnSeries = std::function<Status(PulledSeries&)>;
  explicit SeriesSax(OnSeries on_series) : on_series_(std::move(on_series)) {}

  bool null() { return Fail("unexpected null"); }
  bool boolean(bool) { return Fail("unexpected boolean"); }
  bool number_integer(int64_t v) { return Number(nullptr, v); }
  bool number_unsigned(uint64_t v) {
    return Number(nullptr, v > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(v));
  }
  bool number_float(double, const std::string& s) { return Number(&s, 0); }
  bool binary(json::binary_t&) { return Fail("unexpected binary"); }
  bool string(std::string& s) {
    const size_t at = NextIndex();
    const size_t depth = stack_.size();
    if (depth == 1 && stack_[0].key == "status") {
      status_ = s;
      return true;
    }
    if (depth == 3 && stack_[2].key == "metric") {
      current_.metric = s;
      return true;
    }
    if (depth == 3) return true;  // type, unit: the metric list's descriptor is authoritative
    if (depth == 4 && stack_[2].key == "labels") {
      current_.labels.emplace_back(stack_[3].key, s);
      return true;
    }
    if (depth == 5 && stack_[2].key == "samples" && at == 1) {
      auto v = ParseSampleValue(s);
      if (!v) return Fail(v.error().message);
      value_ = *v;
      have_value_ = true;
      return true;
    }
    return Fail("unexpected string");
  }
  bool start_object(size_t) {
    Push(false);
    if (stack_.size() == 3) current_ = PulledSeries{};
    return stack_.size() <= 4 || Fail("objects nested too deep");
  }
  bool key(std::string& k) {
    stack_.back().key = k;
    return true;
  }
  bool end_object() {
    if (stack_.size() == 3) {
      auto st = on_series_(current_);
      if (!st) return Fail(st.error().message);
    }
    stack_.pop_back();
    return true;
  }
  bool start_array(size_t) {
    Push(true);
    if (stack_.size() == 5) have_time_ = have_value_ = false;
    return stack_.size() <= 5 || Fail("arrays nested too deep");
  }
  bool end_array() {
    if (stack_.size() == 5) {
      if (!have_time_ || !have_value_) return Fail("a sample is not [time, \"value\"]");
      current_.samples.push_back(store::Sample{time_, value_});
    }
    stack_.pop_back();
    return true;
  }
  bool parse_error(size_t position, const std::string&, const nlohmann::detail::exception& ex) {
    return Fail(fmt::format("invalid JSON at byte {}: {}", position, ex.what()));
  }

  const std::string& status() const { return status_; }
  const std::string& error() const { return error_; }

 private:
  struct Frame {
    bool array = false;
    std::string key;   // objects: the current member's key
    size_t index = 0;  // arrays: the index of the next element
  };
  void Push(bool array) {
    if (!stack_.empty() && stack_.back().array) ++stack_.back().index;
    // A container's position in its parent array is what the parent frame counts; the
    // element's own frame starts fresh.
    stack_.push_back(Frame{array, {}, 0});
  }
  // The position of a scalar in the array that holds it (0 outside arrays).
  size_t NextIndex() {
    if (stack_.empty() || !stack_.back().array) return 0;
    return stack_.back().index++;
  }
  bool Number(const std::string* text, int64_t whole) {
    const size_t at = NextIndex();
    if (stack_.size() == 5 && stack_[2].key == "samples") {
      if (at != 0) return Fail("a sample value is a number, not a string");
      if (text) {
        // ParseTimestamp reads Unix seconds with a fraction as integers: exact to the ns.
        auto t = ParseTimestamp(*text);
        if (!t) return Fail(fmt::format("bad sample time '{}'", Cut(*text, 40)));
        time_ = *t;
      } else {
        if (whole > 9'000'000'000LL || whole < -9'000'000'000LL) return Fail("sample time out of range");
        time_ = whole * kNsPerSec;
      }
      have_time_ = true;
      return true;
    }
    return Fail("unexpected number");
  }
  bool Fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
    return false;
  }

  OnSeries on_series_;
  std::vector<Frame> stack_;
  std::string status_;
  std::string error_;
  PulledSeries current_;
  TimeNs time_ = 0;
  double value_ = 0;
  bool have_time_ = false;
  bool have_value_ = false;
};

struct RankKey {
  std::string job;
  int32_t rank = -1;
  friend auto operator<=>(const RankKey&, const RankKey&) = default;
};

}  // namespace

Result<double> ParseSampleValue(std::string_view text) {
  if (text == "NaN") return std::nan("");
  if (text == "+Inf" || text == "Inf") return std::numeric_limits<double>::infinity();
  if (text == "-Inf") return -std::numeric_limits<double>::infinity();
  double v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || std::isnan(v) ||
      std::isinf(v)) {
    return MakeErrorF(ErrorCode::kParse, "'{}' is not a sample value", Cut(text, 40));
  }
  return v;
}

Result<HostPort> ParseHostPort(std::string_view text, uint16_t default_port) {
  HostPort out;
  std::string_view host = text, port_text;
  if (text.starts_with('[')) {
    const size_t close = text.find(']');
    if (close == std::string_view::npos)
      return MakeErrorF(ErrorCode::kInvalidArgument, "'{}': unclosed '['", Cut(text, 80));
    host = text.substr(1, close - 1);
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':')
        return MakeErrorF(ErrorCode::kInvalidArgument, "'{}': expected :PORT after ']'", Cut(text, 80));
      port_text = rest.substr(1);
    }
  } else if (const size_t colon = text.rfind(':'); colon != std::string_view::npos) {
    if (text.find(':') != colon) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "'{}': write an IPv6 address as [ADDR]:PORT",
                        Cut(text, 80));
    }
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  if (host.empty() || host.size() > 253)
    return MakeErrorF(ErrorCode::kInvalidArgument, "'{}': no host", Cut(text, 80));
  for (char c : host) {
    if (c <= ' ' || c == '/' || c == '@' || c == '?' || c == '#' || static_cast<unsigned char>(c) >= 0x7f) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "'{}': the host holds a character a host name cannot",
                        Cut(text, 80));
    }
  }
  out.host = std::string(host);
  out.port = default_port;
  if (!port_text.empty() || (text.size() && text.back() == ':')) {
    unsigned port = 0;
    auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (port_text.empty() || ec != std::errc() || ptr != port_text.data() + port_text.size() || port == 0 ||
        port > 65535) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "'{}': the port must be 1-65535", Cut(text, 80));
    }
    out.port = static_cast<uint16_t>(port);
  }
  return out;
}

struct AgentClient::Impl {
  explicit Impl(AgentClientOptions o) : options(std::move(o)), client(Limits(options)) {}

  static net::HttpLimits Limits(const AgentClientOptions& o) {
    net::HttpLimits l;
    l.connect_timeout = o.connect_timeout;
    l.deadline = o.request_deadline;
    l.max_body_bytes = o.max_body_bytes;
    return l;
  }

  std::string Address() const {
    const bool v6 = options.host.find(':') != std::string::npos;
    return fmt::format("{}{}{}:{}", v6 ? "[" : "", options.host, v6 ? "]" : "", options.port);
  }

  // One bounded GET (net::HttpClient: headers, body and time bounded; never redirected or
  // decompressed). Transport failures are errors; any HTTP status is an answer.
  Result<HttpAnswer> Get(const std::string& path, const Params& params) {
    if (pull_stats && pull_stats->requests >= options.max_requests_per_pull) {
      return MakeErrorF(ErrorCode::kResourceExhausted, "the pull from {} reached its limit of {} requests",
                        Address(), options.max_requests_per_pull);
    }
    if (pull_stats) ++pull_stats->requests;
    const std::string target = params.empty() ? path : path + "?" + net::QueryString(params);
    if (options.transport) {
      auto r = options.transport(target);
      if (!r)
        return MakeErrorF(ErrorCode::kUnavailable, "cannot reach the agent at {}: {}", Address(),
                          r.error().message);
      return std::move(*r);
    }
    net::HttpCall call;
    call.url = net::HttpOrigin(options.host, options.port) + target;
    if (!options.bearer_token.empty()) call.headers.emplace_back("Authorization", "Bearer " + options.bearer_token);
    auto r = client.Send(call);
    if (!r) {
      const Error& e = r.error();
      switch (e.code) {
        case ErrorCode::kResourceExhausted:
        case ErrorCode::kTimeout:
          return MakeErrorF(e.code, "{} {}: {}", Address(), path, e.message);
        default:
          return MakeErrorF(ErrorCode::kUnavailable, "cannot reach the agent at {}: {}", Address(), e.message);
      }
    }
    return HttpAnswer{r->status, std::move(r->body)};
  }

  // A non-200 answer as an error of the right code.
  std::unexpected<Error> StatusError(const std::string& path, const HttpAnswer& a) const {
    const std::string msg = ErrorMessage(a);
    switch (a.status) {
      case 401:
        return MakeErrorF(ErrorCode::kPermission, "the agent at {} refused {} (401: {}); check the token",
                          Address(), path, msg);
      case 422:
        return MakeErrorF(ErrorCode::kResourceExhausted, "the agent at {} refused {} (422: {})", Address(),
                          path, msg);
      case 503:
        return MakeErrorF(ErrorCode::kUnavailable, "the agent at {} answered {} with 503: {}", Address(),
                          path, msg);
      default:
        return MakeErrorF(a.status >= 500 ? ErrorCode::kUnavailable : ErrorCode::kInvalidArgument,
                          "the agent at {} answered {} with {}: {}", Address(), path, a.status, msg);
    }
  }

  Result<json> GetJson(const std::string& path, const Params& params) {
    auto a = Get(path, params);
    if (!a) return std::unexpected(a.error());
    if (a->status != 200) return StatusError(path, *a);
    try {
      return json::parse(a->body);
    } catch (const std::exception& e) {
      return MakeErrorF(ErrorCode::kParse, "the agent at {} answered {} with invalid JSON: {}", Address(),
                        path, Cut(e.what()));
    }
  }

  // {"status":"success","data":...} → data.
  Result<json> GetData(const std::string& path, const Params& params) {
    auto j = GetJson(path, params);
    if (!j) return std::unexpected(j.error());
    if (!j->is_object() || StringMember(*j, "status") != "success" || !j->contains("data")) {
      return MakeErrorF(ErrorCode::kParse, "the agent at {} answered {} without status \"success\" and data",
                        Address(), path);
    }
    return std::move((*j)["data"]);
  }

  // The series a selector matches, each registered with its metric's descriptor from `descs`.
  Status PullSeries(store::Store& dest, const std::string& selector,
                    const std::map<std::string, MetricDesc>& descs, TimeNs from, TimeNs to, int depth);
  Status PullEvents(store::Store& dest, TimeNs from, TimeNs to);
  Status PullSteps(store::Store& dest, const RankKey& key, TimeNs from, TimeNs to, int depth);

  AgentClientOptions options;
  net::HttpClient client;
  PullStats* pull_stats = nullptr;  // the running pull's
  std::set<RankKey> ranks;          // the running pull's (job, rank) pairs
};

namespace {

Params Window(TimeNs from, TimeNs to) {
  return {{"start", FormatRfc3339(from)}, {"end", FormatRfc3339(to)}};
}

// Whether a refusal can be helped by asking for a shorter window: the sample limit and an
// oversized answer can; the series-count limit is counted before the window is applied.
bool SplitHelps(const Error& e) {
  if (e.code != ErrorCode::kResourceExhausted) return false;
  return e.message.find("the selector matches") == std::string::npos &&
         e.message.find("reached its limit of") == std::string::npos;
}

}  // namespace

Status AgentClient::Impl::PullSeries(store::Store& dest, const std::string& selector,
                                     const std::map<std::string, MetricDesc>& descs, TimeNs from, TimeNs to,
                                     int depth) {
  auto a = Get("/api/v1/series", [&] {
    Params p = Window(from, to);
    p.emplace_back("match", selector);
    return p;
  }());
  Status refused = Ok();
  if (!a) {
    refused = std::unexpected(a.error());
  } else if (a->status != 200) {
    refused = StatusError("/api/v1/series", *a);
  }
  if (!refused) {
    if (SplitHelps(refused.error()) && depth < kMaxSplitDepth && to - from >= 2 * options.min_split_window) {
      ++pull_stats->window_splits;
      const TimeNs mid = from + (to - from) / 2;
      if (auto st = PullSeries(dest, selector, descs, from, mid, depth + 1); !st) return st;
      return PullSeries(dest, selector, descs, mid + 1, to, depth + 1);
    }
    return refused;
  }

  SeriesSax sax([&](PulledSeries& s) -> Status {
    auto desc = descs.find(s.metric);
    if (desc == descs.end()) {
      // Stored after the metric list was read: its descriptor (help text) comes next round.
      pull_stats->errors.push_back(
          fmt::format("series of {}: not in the agent's metric list yet", Cut(s.metric, 80)));
      return Ok();
    }
    // A series the destination refuses (a label it cannot hold, its series limit, a descriptor
    // that changed under the same name) is reported; the other series of the answer still land.
    auto labels = LabelSet::From(s.labels);
    if (!labels) {
      pull_stats->errors.push_back(fmt::format("a series of {}: {}", s.metric, labels.error().message));
      return Ok();
    }
    auto ref = dest.RegisterSeries(desc->second, *labels);
    if (!ref) {
      pull_stats->errors.push_back(
          fmt::format("series {}{}: {}", s.metric, labels->ToString().substr(0, 200), ref.error().message));
      return Ok();
    }
    ++pull_stats->series;
    const std::optional<store::Sample> newest = dest.Latest(*ref);
    for (const store::Sample& sample : s.samples) {
      if (newest && sample.t <= newest->t) {
        ++pull_stats->samples_skipped;
        continue;
      }
      if (auto st = dest.Append(*ref, sample.t, sample.v); !st) return st;
      ++pull_stats->samples_appended;
    }
    if (auto job = labels->Get("job_id"); job && !job->empty()) {
      int32_t rank = -1;
      if (auto r = labels->Get("rank")) {
        int v = -1;
        auto [ptr, ec] = std::from_chars(r->data(), r->data() + r->size(), v);
        if (ec == std::errc() && ptr == r->data() + r->size() && v >= 0) rank = v;
      }
      ranks.insert(RankKey{std::string(*job), rank});
    }
    return Ok();
  });
  const bool ok = json::sax_parse(a->body, &sax);
  if (!ok || sax.status() != "success") {
    return MakeErrorF(ErrorCode::kParse, "the agent at {} answered the series of {} with {}", Address(),
                      Cut(selector, 80),
                      sax.error().empty() ? std::string("a body without status \"success\"") : sax.error());
  }
  return Ok();
}

Status AgentClient::Impl::PullEvents(store::Store& dest, TimeNs from, TimeNs to) {
  std::vector<Event> pulled;
  Status partial = Ok();
  TimeNs end = to;
  // Pages walk backwards: the agent keeps the newest events of a window that holds more than a
  // page, so each next page ends at the oldest instant of the previous one. Events at that
  // instant are taken from the next page only (it holds them all unless one instant alone
  // holds a full page).
  while (end >= from) {
    Params p = Window(from, end);
    p.emplace_back("limit", std::to_string(kEventsPerPage));
    auto data = GetData("/api/v1/events", p);
    if (!data) {
      partial = std::unexpected(data.error());
      break;
    }
    if (!data->is_array()) {
      partial = MakeErrorF(ErrorCode::kParse, "the agent at {} answered events with a non-array", Address());
      break;
    }
    std::vector<Event> page;
    page.reserve(data->size());
    for (const json& item : *data) {
      auto e = EventFromJson(item);
      if (!e) {
        partial = MakeErrorF(ErrorCode::kParse, "the agent at {} sent a bad event: {}", Address(),
                             e.error().message);
        break;
      }
      page.push_back(std::move(*e));
    }
    if (!partial) break;
    if (page.size() < kEventsPerPage) {
      pulled.insert(pulled.end(), std::make_move_iterator(page.begin()), std::make_move_iterator(page.end()));
      break;
    }
    TimeNs oldest = page.front().time;
    for (const Event& e : page) oldest = std::min(oldest, e.time);
    bool all_at_oldest = true;
    for (Event& e : page) {
      if (e.time > oldest) {
        all_at_oldest = false;
        pulled.push_back(std::move(e));
      }
    }
    if (all_at_oldest) {
      // More than a page at one instant: the agent can return only a page of them.
      pulled.insert(pulled.end(), std::make_move_iterator(page.begin()), std::make_move_iterator(page.end()));
      pull_stats->errors.push_back(
          fmt::format("the agent at {} holds more than {} events at {}; some were not pulled", Address(),
                      kEventsPerPage, FormatRfc3339(oldest)));
      if (oldest == kMinTime) break;
      end = oldest - 1;
      continue;
    }
    end = oldest;
  }

  // What the destination already holds in the window is not appended twice.
  std::stable_sort(pulled.begin(), pulled.end(),
                   [](const Event& a, const Event& b) { return a.time < b.time; });
  std::multimap<std::tuple<TimeNs, EventKind, std::string>, Event> existing;
  if (!pulled.empty()) {
    store::EventQuery q;
    q.from = pulled.front().time;
    q.to = pulled.back().time;
    q.limit = std::numeric_limits<size_t>::max();
    for (Event& e : dest.Events(q)) {
      auto key = std::make_tuple(e.time, e.kind, e.name);
      existing.emplace(std::move(key), std::move(e));
    }
  }
  for (Event& e : pulled) {
    // Named before the duplicate check: a rank known only from its output still gets its steps
    // pulled for the new window.
    if (!e.identity.job.empty()) ranks.insert(RankKey{e.identity.job, e.identity.rank});
    auto [lo, hi] = existing.equal_range(std::make_tuple(e.time, e.kind, e.name));
    bool seen = false;
    for (auto it = lo; it != hi; ++it) {
      if (it->second == e) {
        existing.erase(it);  // an equal event pulled twice in one window is two events
        seen = true;
        break;
      }
    }
    if (seen) {
      ++pull_stats->events_skipped;
      continue;
    }
    if (auto st = dest.AppendEvent(std::move(e)); !st) {
      if (partial) partial = st;
      continue;
    }
    ++pull_stats->events_appended;
  }
  return partial;
}

Status AgentClient::Impl::PullSteps(store::Store& dest, const RankKey& key, TimeNs from, TimeNs to,
                                    int depth) {
  Params p = Window(from, to);
  p.emplace_back("job", key.job);
  p.emplace_back("rank", std::to_string(key.rank));
  auto data = GetData("/api/v1/steps", p);
  if (!data) {
    if (SplitHelps(data.error()) && depth < kMaxSplitDepth && to - from >= 2 * options.min_split_window) {
      ++pull_stats->window_splits;
      const TimeNs mid = from + (to - from) / 2;
      if (auto st = PullSteps(dest, key, from, mid, depth + 1); !st) return st;
      return PullSteps(dest, key, mid + 1, to, depth + 1);
    }
    return std::unexpected(data.error());
  }
  if (!data->is_array())
    return MakeErrorF(ErrorCode::kParse, "the agent at {} answered steps with a non-array", Address());
  std::vector<StepSpan> spans;
  spans.reserve(data->size());
  for (const json& item : *data) {
    if (!item.is_object()) return MakeError(ErrorCode::kParse, "a step span is not an object");
    auto step = OptInt(item, "step", INT64_MIN);
    auto start = OptInt(item, "start_unix_ns", INT64_MIN);
    auto end = OptInt(item, "end_unix_ns", INT64_MIN);
    if (!step || !start || !end || *step == INT64_MIN || *start == INT64_MIN || *end == INT64_MIN) {
      return MakeErrorF(ErrorCode::kParse,
                        "the agent at {} sent a step span without step/start_unix_ns/end_unix_ns", Address());
    }
    spans.push_back(StepSpan{*step, *start, *end});
  }
  std::sort(spans.begin(), spans.end(), [](const StepSpan& a, const StepSpan& b) { return a.step < b.step; });
  for (const StepSpan& s : spans) {
    if (auto st = dest.RecordStep(key.job, key.rank, s); !st) return st;
    ++pull_stats->steps_recorded;
  }
  return Ok();
}

AgentClient::AgentClient(AgentClientOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
AgentClient::~AgentClient() = default;

std::string AgentClient::Address() const { return impl_->Address(); }

Result<std::vector<Diagnosis>> AgentClient::Diagnoses() {
  impl_->pull_stats = nullptr;
  const std::string path = "/api/v1/diagnoses";
  auto a = impl_->Get(path, {});
  impl_->client.Close();  // one request: no idle connection left on the agent
  if (!a) return std::unexpected(a.error());
  if (a->status == 503) {
    return MakeErrorF(ErrorCode::kUnavailable,
                      "diagnosis is off on the agent at {} (its diagnose-interval is 0): {}",
                      impl_->Address(), ErrorMessage(*a));
  }
  if (a->status != 200) return impl_->StatusError(path, *a);
  json j;
  try {
    j = json::parse(a->body);
  } catch (const std::exception& e) {
    return MakeErrorF(ErrorCode::kParse, "the agent at {} answered {} with invalid JSON: {}",
                      impl_->Address(), path, Cut(e.what()));
  }
  if (!j.is_object() || StringMember(j, "schema") != investigate::kDiagnosisSchema ||
      !j.contains("diagnoses") || !j["diagnoses"].is_array()) {
    return MakeErrorF(ErrorCode::kParse,
                      "the agent at {} answered {} with something other than {{\"schema\":\"{}\","
                      "\"diagnoses\":[...]}}",
                      impl_->Address(), path, investigate::kDiagnosisSchema);
  }
  std::vector<Diagnosis> out;
  out.reserve(j["diagnoses"].size());
  for (size_t i = 0; i < j["diagnoses"].size(); ++i) {
    auto d = investigate::DiagnosisFromJson(j["diagnoses"][i]);
    if (!d) {
      return MakeErrorF(ErrorCode::kParse, "the agent at {}: diagnosis {} is not schema v1: {}",
                        impl_->Address(), i, d.error().message);
    }
    out.push_back(std::move(*d));
  }
  return out;
}

Result<std::string> AgentClient::Health() {
  impl_->pull_stats = nullptr;
  auto a = impl_->Get("/healthz", {});
  impl_->client.Close();
  if (!a) return std::unexpected(a.error());
  if (a->status != 200) return impl_->StatusError("/healthz", *a);
  return std::move(a->body);
}

Result<std::string> AgentClient::NodeName() {
  impl_->pull_stats = nullptr;
  const std::string path = "/api/v1/version";
  auto a = impl_->Get(path, {});
  impl_->client.Close();
  if (!a) return std::unexpected(a.error());
  if (a->status != 200) return impl_->StatusError(path, *a);
  json j;
  try {
    j = json::parse(a->body);
  } catch (const std::exception& e) {
    return MakeErrorF(ErrorCode::kParse, "the agent at {} answered {} with invalid JSON: {}", impl_->Address(), path,
                      Cut(e.what()));
  }
  if (!j.is_object()) {
    return MakeErrorF(ErrorCode::kParse, "the agent at {} answered {} with something other than an object",
                      impl_->Address(), path);
  }
  auto it = j.find("node");
  if (it == j.end()) return std::string();  // an agent that names no node
  if (!it->is_string()) {
    return MakeErrorF(ErrorCode::kParse, "the agent at {} answered {} with a node that is not a string",
                      impl_->Address(), path);
  }
  std::string node = it->get<std::string>();
  const bool bad = node.size() > 253 || std::any_of(node.begin(), node.end(), [](char c) {
                     return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f;
                   });
  if (bad) {
    return MakeErrorF(ErrorCode::kParse, "the agent at {} reports a node name that is not one ('{}')",
                      impl_->Address(), Cut(node));
  }
  return node;
}

Status AgentClient::PullInto(store::Store& store, TimeNs from, TimeNs to, PullStats* stats) {
  PullStats local;
  PullStats& st = stats ? *stats : local;
  st = PullStats{};
  Impl& impl = *impl_;
  impl.pull_stats = &st;
  impl.ranks.clear();
  // The connection is kept alive within a pull and closed after it: a hub pulling every 10 s
  // must not hold an idle connection that delays the agent's shutdown.
  struct Reset {
    Impl& impl;
    ~Reset() {
      impl.pull_stats = nullptr;
      impl.client.Close();
    }
  } reset{impl};
  if (from > to) return MakeErrorF(ErrorCode::kInvalidArgument, "pull window starts after it ends");

  // The metric list first: it is the agent's descriptors, and the one answer a pull cannot do
  // without (an agent that does not give it is down for the caller).
  auto list = impl.GetData("/api/v1/metrics", {});
  if (!list) return std::unexpected(list.error());
  if (!list->is_array())
    return MakeErrorF(ErrorCode::kParse, "the agent at {} answered its metric list with a non-array",
                      impl.Address());
  std::vector<MetricDesc> stored;
  for (const json& m : *list) {
    if (!m.is_object() || !TrueMember(m, "stored")) continue;
    MetricDesc d;
    try {
      d.name = m.at("name").get<std::string>();
      d.help = StringMember(m, "help");
      d.unit = StringMember(m, "unit");
      auto type = ParseMetricType(StringMember(m, "type"));
      if (!type)
        return MakeErrorF(ErrorCode::kParse, "the agent at {}: metric {}: {}", impl.Address(),
                          Cut(d.name, 80), type.error().message);
      d.type = *type;
      if (auto it = m.find("labels"); it != m.end() && it->is_array())
        d.label_names = it->get<std::vector<std::string>>();
    } catch (const std::exception& e) {
      return MakeErrorF(ErrorCode::kParse, "the agent at {} sent a malformed metric list: {}", impl.Address(),
                        Cut(e.what()));
    }
    stored.push_back(std::move(d));
  }
  st.reached = true;
  st.metrics = stored.size();

  // Every series in one query (a request costs a round trip; an agent holds ~100 metrics); when
  // the agent refuses it as too large (more series than one query may match, or too many
  // samples even in short windows), one query per metric. A query refused for its samples is
  // split in time first.
  std::map<std::string, MetricDesc> descs;
  for (const MetricDesc& d : stored) descs.emplace(d.name, d);
  bool per_metric = true;
  if (!descs.empty()) {
    auto all = impl.PullSeries(store, kEverySeries, descs, from, to, 0);
    // Refused for its size even split down to min_split_window: per metric (what was copied
    // already is skipped, not copied twice).
    per_metric = !all && all.error().code == ErrorCode::kResourceExhausted &&
                 all.error().message.find("reached its limit of") == std::string::npos;
    if (!all && !per_metric) st.errors.push_back(fmt::format("series: {}", all.error().message));
  }
  for (const MetricDesc& d : per_metric ? stored : std::vector<MetricDesc>{}) {
    if (auto s = impl.PullSeries(store, d.name, descs, from, to, 0); !s) {
      st.errors.push_back(fmt::format("series of {}: {}", d.name, s.error().message));
    }
  }
  if (auto s = impl.PullEvents(store, from, to); !s)
    st.errors.push_back(fmt::format("events: {}", s.error().message));
  st.rank_timelines = impl.ranks.size();
  for (const RankKey& key : impl.ranks) {
    if (auto s = impl.PullSteps(store, key, from, to, 0); !s) {
      st.errors.push_back(fmt::format("steps of job {} rank {}: {}", key.job, key.rank, s.error().message));
    }
  }
  if (!st.errors.empty()) {
    return MakeErrorF(ErrorCode::kUnavailable, "the pull from {} was partial: {} part(s) failed; first: {}",
                      impl.Address(), st.errors.size(), st.errors.front());
  }
  return Ok();
}

}  // namespace ithbat::remote
