// The per-stream orchestrator: which parsers see a line, who owns the stream, de-duplication.
//
// Detection (format "auto"): while no framework owns the stream, every framework candidate sees
// each line, in order: the user pattern parser, the frameworks the command line hints at, then
// the rest in registry order. A line's framework events come from the first candidate that
// recognised it and produced events (two readings of one line are not both reported). Every
// candidate that recognised the line counts it; the first to reach kOwnLines owns the stream,
// and the others are dropped. The generic parser runs only while undecided and only on lines no framework
// recognised. Always-on parsers see every line. The user pattern parser, when configured, also
// keeps running after a built-in framework owns the stream: users add patterns for lines their
// framework's parser does not know.
#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <functional>
#include <optional>

#include "collect/joblog/parsers/parser.h"
#include "collect/joblog/parsers/scan.h"

namespace ithbat::collect::joblog {
namespace {

constexpr int kOwnLines = 2;

// Command-line hints (lower-case substrings) -> framework, in priority order.
struct Hint {
  std::string_view needle;
  std::string_view framework;
};
constexpr std::array<Hint, 30> kHints = {{
    {"megatron", "megatron"},
    {"pretrain_gpt", "megatron"},
    {"pretrain_bert", "megatron"},
    {"pretrain_t5", "megatron"},
    {"pretrain_mamba", "megatron"},
    {"torchtitan", "torchtitan"},
    {"job.config_file", "torchtitan"},
    {"fairseq", "fairseq"},
    {"nanogpt", "nanogpt"},
    {"nemo", "nemo2"},
    {"nemo", "lightning"},
    {"lightning", "lightning"},
    {"transformers", "hf_trainer"},
    {"accelerate", "hf_trainer"},
    {"axolotl", "hf_trainer"},
    {"llamafactory", "hf_trainer"},
    {"llama_factory", "hf_trainer"},
    {"llamafactory-cli", "hf_trainer"},
    {"trl ", "hf_trainer"},
    {"run_clm", "hf_trainer"},
    {"run_mlm", "hf_trainer"},
    {"run_qa", "hf_trainer"},
    {"run_glue", "hf_trainer"},
    {"run_translation", "hf_trainer"},
    {"xtuner", "mmengine"},
    {"mmdet", "mmengine"},
    {"mmseg", "mmengine"},
    {"mmpretrain", "mmengine"},
    {"mmengine", "mmengine"},
    {"mmcv", "mmengine"},
}};

std::string Lower(std::string_view s) {
  std::string out(s.substr(0, 4096));
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A line is a copy when its events equal those of a line at most this many lines before it in
// the same stream: ranks started by one launcher into one file (or one pipe) print the same step
// line each, without a prefix that tells them apart, and interleave within a few lines
// of each other per rank. 512 lines covers 64 ranks printing up to 8 lines per step.
constexpr uint64_t kCopyWindowLines = 512;
constexpr size_t kCopySlots = 1024;  // direct-mapped by hash; a collision only forgets a line

bool SameEvent(const ParsedEvent& a, const ParsedEvent& b) {
  return a.kind == b.kind && a.step == b.step && a.name == b.name && a.rank == b.rank;
}

}  // namespace

struct StreamParser::State {
  struct Candidate {
    std::unique_ptr<FormatParser> parser;
    int recognised = 0;
  };
  std::vector<Candidate> candidates;      // framework parsers while undecided; [owner] after
  int owner = -1;                         // index into candidates
  std::unique_ptr<FormatParser> user;     // user pattern sets, when configured
  int user_hits = 0;                      // lines the user parser recognised while undecided
  std::unique_ptr<FormatParser> generic;  // while undecided
  std::vector<std::unique_ptr<FormatParser>> always_on;
  std::string forced;  // forced framework name ("" for auto and none)
  bool none = false;
  uint64_t lines = 0;
  uint64_t recognised_lines = 0;
  // Lines whose events were a copy of a recent line's (CopyOf), by event hash: direct-mapped, an
  // entry holds the hash and the line that set it.
  struct Seen {
    uint64_t hash = 0;
    uint64_t line = 0;
  };
  std::array<Seen, kCopySlots> seen{};
  uint64_t copies = 0;
};

StreamParser::StreamParser() : state_(std::make_unique<State>()) {}
StreamParser::StreamParser(StreamParser&&) noexcept = default;
StreamParser& StreamParser::operator=(StreamParser&&) noexcept = default;
StreamParser::~StreamParser() = default;

Result<StreamParser> StreamParser::Create(StreamParserOptions options) {
  StreamParser sp;
  State& st = *sp.state_;
  for (const ParserInfo& info : BuiltinParsers()) {
    if (info.role == ParserRole::kAlwaysOn) st.always_on.push_back(info.make());
  }
  std::vector<std::string> user_names;
  if (options.user_patterns != nullptr) user_names = options.user_patterns->names();

  const std::string& format = options.format;
  if (format == "none") {
    st.none = true;
    return sp;
  }
  if (options.user_patterns != nullptr && !user_names.empty()) st.user = options.user_patterns->MakeParser();

  if (format != "auto" && !format.empty()) {
    const ParserInfo* info = FindParser(format);
    const bool is_user = std::find(user_names.begin(), user_names.end(), format) != user_names.end() ||
                         (st.user != nullptr && st.user->name() == format);
    if (info == nullptr && !is_user) {
      return MakeErrorF(ErrorCode::kInvalidArgument, "unknown log format '{}' (see `ithbat parse --list`)",
                        format);
    }
    st.forced = format;
    if (is_user && info == nullptr) {
      st.candidates.push_back({std::move(st.user), kOwnLines});
      st.owner = 0;
    } else if (info->role != ParserRole::kAlwaysOn) {
      // A framework or the generic parser, forced to own the stream.
      st.candidates.push_back({info->make(), kOwnLines});
      st.owner = 0;
    }
    return sp;
  }

  // Auto: hinted frameworks first, then the rest in registry order.
  std::vector<std::string_view> order;
  const std::string cmd = Lower(options.command_line);
  if (!cmd.empty()) {
    for (const Hint& h : kHints) {
      if (cmd.find(h.needle) == std::string::npos) continue;
      if (std::find(order.begin(), order.end(), h.framework) == order.end()) order.push_back(h.framework);
    }
  }
  for (const ParserInfo& info : BuiltinParsers()) {
    if (info.role != ParserRole::kFramework) continue;
    if (std::find(order.begin(), order.end(), info.name) == order.end()) order.push_back(info.name);
  }
  for (std::string_view name : order) {
    const ParserInfo* info = FindParser(name);
    if (info != nullptr && info->role == ParserRole::kFramework) st.candidates.push_back({info->make(), 0});
  }
  if (const ParserInfo* g = FindParser("generic"); g != nullptr) st.generic = g->make();
  return sp;
}

void StreamParser::Parse(const LineView& given, std::vector<ParsedEvent>& out) {
  State& st = *state_;
  // While undecided, every framework parser and the generic one test the line for their
  // anchors: the facts those tests read are computed once here. Once a framework owns the
  // stream too few parsers share them to pay for the pass.
  std::optional<LineFacts> facts;
  LineView line = given;
  if (line.facts == nullptr && st.owner < 0 && !st.none) {
    facts.emplace(LineFacts::Of(line.text));
    line.facts = &*facts;
  }
  ++st.lines;
  const size_t base = out.size();
  bool recognised = false;

  if (!st.none) {
    if (st.owner >= 0) {
      recognised |= st.candidates[st.owner].parser->Parse(line, out);
      if (st.user != nullptr) recognised |= st.user->Parse(line, out);
    } else {
      // Undecided. The user parser competes first, then the built-ins in candidate order.
      bool framework_seen = false;
      bool reading_kept = false;  // events of one reading of the line are kept already
      int new_owner = -1;
      bool user_owns = false;
      if (st.user != nullptr) {
        const size_t before = out.size();
        if (st.user->Parse(line, out)) {
          framework_seen = true;
          reading_kept = out.size() > before;
          // Counted as a candidate of its own: ownership by the user's patterns wins.
          if (++st.user_hits >= kOwnLines) user_owns = true;
        } else {
          out.resize(before);
        }
      }
      for (size_t i = 0; i < st.candidates.size(); ++i) {
        auto& c = st.candidates[i];
        const size_t before = out.size();
        const bool r = c.parser->Parse(line, out);
        // Only one reading of a line is reported: the first candidate's that produced events.
        if (!r || reading_kept) out.resize(before);
        if (r) {
          framework_seen = true;
          reading_kept = reading_kept || out.size() > before;
          if (++c.recognised >= kOwnLines && new_owner < 0) new_owner = static_cast<int>(i);
        }
      }
      recognised |= framework_seen;
      if (!framework_seen && st.generic != nullptr) {
        const size_t before = out.size();
        if (st.generic->Parse(line, out))
          recognised = true;
        else
          out.resize(before);
      }
      if (user_owns) {
        st.candidates.clear();
        st.candidates.push_back({std::move(st.user), kOwnLines});
        st.owner = 0;
        st.generic.reset();
      } else if (new_owner >= 0) {
        State::Candidate owner = std::move(st.candidates[new_owner]);
        st.candidates.clear();
        st.candidates.push_back(std::move(owner));
        st.owner = 0;
        st.generic.reset();
      }
    }
  }
  for (auto& p : st.always_on) recognised |= p->Parse(line, out);

  // De-duplicate within the line (two parsers reporting the same fact), then bound the line.
  size_t keep = base;
  for (size_t i = base; i < out.size(); ++i) {
    bool dup = false;
    for (size_t j = base; j < keep && !dup; ++j) dup = SameEvent(out[j], out[i]);
    if (dup) continue;
    if (keep != i) out[keep] = std::move(out[i]);
    ++keep;
  }
  out.resize(std::min(keep, base + kMaxEventsPerLine));
  if (recognised) ++st.recognised_lines;
  if (CopyOf(st, out, base)) {
    out.resize(base);
    ++st.copies;
  }
}

// Whether the line's events (out[base..]) repeat a line of the last kCopyWindowLines. Only lines
// stamped with a step number are compared: what happened at step N is printed once per rank, so
// the same events at the same step are a copy. Lines without one are never compared — a constant
// learning rate, "Saving the checkpoint..." at every save, a NaN loss printed at every step, an
// error a process repeats are each a new occurrence. Everything an event holds is compared, rank
// included: copies from ranks whose prefix names them differ by rank and stay.
bool StreamParser::CopyOf(State& st, const std::vector<ParsedEvent>& out, size_t base) {
  bool stamped = false;
  for (size_t i = base; i < out.size() && !stamped; ++i) stamped = out[i].step >= 0;
  if (!stamped) return false;
  // Kind, name, step, rank and value of every event: what a rank's own line would differ in (the
  // attributes and text repeat what the values say). Mixed a word at a time, not byte-wise: this
  // runs on every line that carries a step.
  auto mix = [](uint64_t h, uint64_t x) { return (h ^ (x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2))); };
  uint64_t h = 0;
  for (size_t i = base; i < out.size(); ++i) {
    const ParsedEvent& e = out[i];
    h = mix(h, (static_cast<uint64_t>(e.kind) << 32) ^ static_cast<uint32_t>(e.rank));
    h = mix(h, static_cast<uint64_t>(e.step));
    h = mix(h, std::bit_cast<uint64_t>(e.value));
    h = mix(h, std::hash<std::string_view>{}(e.name));
  }
  State::Seen& slot = st.seen[h % kCopySlots];
  const bool copy = slot.line > 0 && slot.hash == h && st.lines - slot.line <= kCopyWindowLines;
  if (!copy) slot = {h, st.lines};
  return copy;
}

std::string_view StreamParser::framework() const {
  const State& st = *state_;
  if (!st.forced.empty()) return st.forced;
  if (st.owner >= 0) return st.candidates[st.owner].parser->name();
  return {};
}

uint64_t StreamParser::lines() const { return state_->lines; }
uint64_t StreamParser::recognised_lines() const { return state_->recognised_lines; }
uint64_t StreamParser::copies() const { return state_->copies; }

}  // namespace ithbat::collect::joblog
