#include "collect/probes/probe_bpf.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <dlfcn.h>
#include <fmt/core.h>
#include <link.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "collect/probes/elf_reader.h"
#include "collect/probes/probe_table.h"
#include "cuda_probes.skel.h"

// The function MeasureHitCost probes in the agent's own binary. Written in assembly on x86-64 so
// that its first instruction is a register mov, which the kernel single-steps out of line (as it
// does a driver entry's first instruction unless that is a push/nop/jmp it emulates): the
// measured cost is the usual, not the cheaper, path.
extern "C" uint64_t ithbat_probe_calibration_target(uint64_t x);
#if defined(__x86_64__)
asm(R"(
  .pushsection .text
  .globl ithbat_probe_calibration_target
  .type ithbat_probe_calibration_target, @function
ithbat_probe_calibration_target:
  movq %rdi, %rax
  addq $1, %rax
  ret
  .size ithbat_probe_calibration_target, .-ithbat_probe_calibration_target
  .popsection
)");
#else
extern "C" __attribute__((noinline, used)) uint64_t ithbat_probe_calibration_target(uint64_t x) {
  asm volatile("" : "+r"(x));
  return x + 1;
}
#endif

namespace ithbat::collect::probes {

namespace {

// uapi (kernel 6.6+) values libbpf 1.1's headers predate.
constexpr int kBpfTraceUprobeMulti = 48;    // enum bpf_attach_type BPF_TRACE_UPROBE_MULTI
constexpr uint32_t kUprobeMultiReturn = 1;  // BPF_F_UPROBE_MULTI_RETURN
constexpr int kBpfLinkCreate = 28;          // enum bpf_cmd BPF_LINK_CREATE

// union bpf_attr's link_create member with its uprobe_multi arm, as in include/uapi/linux/bpf.h.
struct LinkCreateUprobeMulti {
  uint32_t prog_fd;
  uint32_t target_fd;
  uint32_t attach_type;
  uint32_t flags;
  uint64_t path;
  uint64_t offsets;
  uint64_t ref_ctr_offsets;
  uint64_t cookies;
  uint32_t cnt;
  uint32_t multi_flags;
  uint32_t pid;
  uint32_t pad;
};
static_assert(sizeof(LinkCreateUprobeMulti) == 64);

}  // namespace

namespace {

int64_t MonoNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

int64_t ThreadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

LinkCloser::LinkCloser(size_t max_threads) : max_threads_(std::clamp<size_t>(max_threads, 1, 64)) {}

LinkCloser::~LinkCloser() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

std::shared_ptr<const LinkCloser::Ticket> LinkCloser::Submit(std::unique_ptr<Attachment> a) {
  auto ticket = std::make_shared<Ticket>();
  {
    std::lock_guard lock(mu_);
    queue_.emplace_back(std::move(a), ticket);
    // A thread more when every waiting one already has an item to take (bounded): closes of
    // several processes wait out their grace periods side by side, not one after another.
    if (queue_.size() > idle_ && threads_.size() < max_threads_) threads_.emplace_back([this] { Run(); });
  }
  cv_.notify_one();
  return ticket;
}

void LinkCloser::Run() {
  std::unique_lock lock(mu_);
  for (;;) {
    ++idle_;
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    --idle_;
    if (queue_.empty()) return;  // stop_ and nothing left to close
    auto item = std::move(queue_.front());
    queue_.pop_front();
    ++busy_;
    lock.unlock();
    item.second->started_ns.store(MonoNs());
    item.first.reset();  // the blocking part: the kernel's grace period
    lock.lock();
    item.second->done.store(true);  // under mu_: Wait's predicate cannot miss it
    --busy_;
    done_cv_.notify_all();
  }
}

void LinkCloser::Wait(const Ticket& ticket) {
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return ticket.done.load(); });
}

void LinkCloser::Drain() {
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return queue_.empty() && busy_ == 0; });
}

size_t LinkCloser::pending() const {
  std::lock_guard lock(mu_);
  return queue_.size() + busy_;
}

size_t LinkCloser::threads() const {
  std::lock_guard lock(mu_);
  return threads_.size();
}

PinnedFile::~PinnedFile() {
  if (fd_ >= 0) close(fd_);
}

Attachment::~Attachment() {
  for (bpf_link* l : links_) bpf_link__destroy(l);
  for (int fd : fds_) close(fd);
}

ProbeBpf::~ProbeBpf() {
  if (rb_ != nullptr) ring_buffer__free(rb_);
  if (skel_ != nullptr) cuda_probes_bpf__destroy(skel_);
}

Result<std::unique_ptr<ProbeBpf>> ProbeBpf::Load() {
  std::unique_ptr<ProbeBpf> p(new ProbeBpf());
  // uprobe_multi first (a kernel without it refuses the attach type at load), then classic.
  // ITHBAT_PROBES_NO_MULTI=1 forces the classic way (tests of the fallback).
  const char* no_multi = std::getenv("ITHBAT_PROBES_NO_MULTI");
  const bool try_multi = no_multi == nullptr || std::strcmp(no_multi, "1") != 0;
  std::string multi_error;
  for (int attempt = try_multi ? 0 : 1; attempt < 2; ++attempt) {
    p->skel_ = cuda_probes_bpf__open();
    if (p->skel_ == nullptr) {
      return MakeErrorF(ErrorCode::kUnavailable, "cannot open the CUDA probes BPF object: {}",
                        std::strerror(errno));
    }
    if (attempt == 0) {
      bpf_program__set_expected_attach_type(p->skel_->progs.probe_enter,
                                            static_cast<bpf_attach_type>(kBpfTraceUprobeMulti));
      bpf_program__set_expected_attach_type(p->skel_->progs.probe_exit,
                                            static_cast<bpf_attach_type>(kBpfTraceUprobeMulti));
    }
    const int err = cuda_probes_bpf__load(p->skel_);
    if (err == 0) {
      p->multi_ = attempt == 0;
      break;
    }
    cuda_probes_bpf__destroy(p->skel_);
    p->skel_ = nullptr;
    if (attempt == 0) {
      multi_error = std::strerror(-err);
      continue;
    }
    return MakeErrorF(ErrorCode::kUnavailable, "the kernel refused the CUDA probes BPF programs: {}{}",
                      std::strerror(-err), multi_error.empty() ? "" : " (uprobe_multi: " + multi_error + ")");
  }
  p->rb_ = ring_buffer__new(bpf_map__fd(p->skel_->maps.records), &ProbeBpf::OnRecord, p.get(), nullptr);
  if (p->rb_ == nullptr) {
    return MakeErrorF(ErrorCode::kUnavailable, "cannot map the CUDA probes ring buffer: {}",
                      std::strerror(errno));
  }
  return p;
}

int ProbeBpf::OnRecord(void* ctx, void* data, size_t size) {
  auto* self = static_cast<ProbeBpf*>(ctx);
  if (size < sizeof(cuda_probe_record) || !self->sink_) return 0;
  cuda_probe_record r;
  std::memcpy(&r, data, sizeof(r));
  self->sink_(r);
  return 0;
}

Result<std::unique_ptr<Attachment>> ProbeBpf::AttachMulti(int32_t pid, const std::string& path,
                                                          const std::vector<Target>& targets) {
  auto a = std::make_unique<Attachment>();
  for (const bool ret : {false, true}) {
    std::vector<uint64_t> offsets, cookies;
    for (const Target& t : targets) {
      const ProbeSpec* p = FindProbe(t.probe);
      if (p == nullptr || (ret && !p->timed)) continue;
      offsets.push_back(t.offset);
      cookies.push_back(p->Cookie());
    }
    if (offsets.empty()) continue;
    LinkCreateUprobeMulti attr{};
    attr.prog_fd =
        static_cast<uint32_t>(bpf_program__fd(ret ? skel_->progs.probe_exit : skel_->progs.probe_enter));
    attr.attach_type = kBpfTraceUprobeMulti;
    attr.path = reinterpret_cast<uintptr_t>(path.c_str());
    attr.offsets = reinterpret_cast<uintptr_t>(offsets.data());
    attr.cookies = reinterpret_cast<uintptr_t>(cookies.data());
    attr.cnt = static_cast<uint32_t>(offsets.size());
    attr.multi_flags = ret ? kUprobeMultiReturn : 0;
    attr.pid = static_cast<uint32_t>(pid);
    const long fd = syscall(__NR_bpf, kBpfLinkCreate, &attr, sizeof(attr));
    if (fd < 0) {
      const int err = errno;
      a->failed_ += offsets.size();
      if (a->first_error_.empty()) {
        a->first_error_ = fmt::format("uprobe_multi ({} {} probes) in {}: {}", offsets.size(),
                                      ret ? "return" : "entry", path, std::strerror(err));
      }
      continue;
    }
    // O_CLOEXEC: the kernel sets it on BPF link fds already.
    a->fds_.push_back(static_cast<int>(fd));
    a->points_ += offsets.size();
  }
  if (a->fds_.empty() && a->failed_ > 0) {
    return MakeErrorF(ErrorCode::kUnavailable, "pid {}: no uprobe attached ({})", pid, a->first_error_);
  }
  return a;
}

Result<std::unique_ptr<Attachment>> ProbeBpf::Attach(int32_t pid, const std::string& path,
                                                     const std::vector<Target>& targets) {
  if (multi_) return AttachMulti(pid, path, targets);
  auto a = std::make_unique<Attachment>();
  auto one = [&](bpf_program* prog, const Target& t, uint64_t cookie, bool ret) {
    LIBBPF_OPTS(bpf_uprobe_opts, opts, .bpf_cookie = cookie, .retprobe = ret);
    bpf_link* l = bpf_program__attach_uprobe_opts(prog, pid, path.c_str(), t.offset, &opts);
    if (l == nullptr) {
      const int err = errno;
      ++a->failed_;
      if (a->first_error_.empty()) {
        a->first_error_ = fmt::format("{} at {:#x} in {}: {}", t.symbol.empty() ? "<internal>" : t.symbol,
                                      t.offset, path, std::strerror(err));
      }
      return;
    }
    a->links_.push_back(l);
    ++a->points_;
  };
  for (const Target& t : targets) {
    const ProbeSpec* p = FindProbe(t.probe);
    if (p == nullptr) continue;
    const uint64_t cookie = p->Cookie();
    one(skel_->progs.probe_enter, t, cookie, false);
    if (p->timed) one(skel_->progs.probe_exit, t, cookie, true);
  }
  if (a->links_.empty() && a->failed_ > 0) {
    return MakeErrorF(ErrorCode::kUnavailable, "pid {}: no uprobe attached ({})", pid, a->first_error_);
  }
  return a;
}

Status ProbeBpf::ReadStats(std::vector<StatEntry>* out) const {
  out->clear();
  const int fd = bpf_map__fd(skel_->maps.stats);
  cuda_probe_key key{};
  cuda_probe_key next{};
  const void* prev = nullptr;
  for (size_t i = 0; i < CUDA_PROBES_MAX_STATS; ++i) {
    if (bpf_map_get_next_key(fd, prev, &next) != 0) break;
    cuda_probe_value v{};
    if (bpf_map_lookup_elem(fd, &next, &v) == 0) out->push_back({next, v});
    key = next;
    prev = &key;
  }
  return Ok();
}

void ProbeBpf::ResetMaxima(uint32_t tgid) {
  const int fd = bpf_map__fd(skel_->maps.stats);
  cuda_probe_key k{};
  k.tgid = tgid;
  k.probe = CUDA_PROBE_ID_LAUNCH_GAP;
  k.slot = CUDA_SLOT_GAP_MAX;
  cuda_probe_value zero{};
  bpf_map_update_elem(fd, &k, &zero, BPF_EXIST);
}

namespace {

// Every key of the map whose leading __u32 is `tgid` (every key of cuda_probes.bpf.c starts with
// the tgid), concatenated. Collected before any deletion: deleting while walking restarts a hash
// map's get_next_key from the beginning.
std::vector<unsigned char> KeysOfTgid(const bpf_map* map, uint32_t tgid) {
  const int fd = bpf_map__fd(map);
  const size_t key_size = bpf_map__key_size(map);
  const size_t max = bpf_map__max_entries(map);
  if (fd < 0 || key_size < sizeof(uint32_t) || key_size > 64) return {};
  std::vector<unsigned char> prev(key_size), next(key_size);
  std::vector<unsigned char> doomed;
  bool first = true;
  for (size_t i = 0; i < max; ++i) {
    if (bpf_map_get_next_key(fd, first ? nullptr : prev.data(), next.data()) != 0) break;
    first = false;
    uint32_t key_tgid = 0;
    std::memcpy(&key_tgid, next.data(), sizeof(key_tgid));
    if (key_tgid == tgid) doomed.insert(doomed.end(), next.begin(), next.end());
    prev.swap(next);
  }
  return doomed;
}

void DeleteKeysOfTgid(const bpf_map* map, uint32_t tgid) {
  const std::vector<unsigned char> doomed = KeysOfTgid(map, tgid);
  const int fd = bpf_map__fd(map);
  const size_t key_size = bpf_map__key_size(map);
  for (size_t off = 0; off + key_size <= doomed.size(); off += key_size)
    bpf_map_delete_elem(fd, &doomed[off]);
}

}  // namespace

void ProbeBpf::ForgetProcess(uint32_t tgid) {
  // Counters, per-thread state (last launch, group depth, pending entries) and communicators: a
  // later process with this pid starts from nothing, and a re-attach of the same process does
  // not measure the detached time as a launch gap.
  for (const bpf_map* m : {skel_->maps.stats, skel_->maps.last_launch, skel_->maps.group_depth,
                           skel_->maps.entries, skel_->maps.comms}) {
    DeleteKeysOfTgid(m, tgid);
  }
}

void ProbeBpf::ForgetLaunchState(uint32_t tgid) { DeleteKeysOfTgid(skel_->maps.last_launch, tgid); }

Result<HitCost> ProbeBpf::MeasureHitCost(uint64_t calls, int rounds) {
  calls = std::clamp<uint64_t>(calls, 100, 1'000'000);
  rounds = std::clamp(rounds, 1, 21);
  // The target's file offset: its address minus the load bias of the object holding it (the
  // executable when the module is linked statically), through that file's PT_LOAD headers.
  Dl_info info{};
  link_map* lm = nullptr;
  void* fn = reinterpret_cast<void*>(&ithbat_probe_calibration_target);
  if (dladdr1(fn, &info, reinterpret_cast<void**>(&lm), RTLD_DL_LINKMAP) == 0 || lm == nullptr) {
    return MakeError(ErrorCode::kInternal, "calibration: dladdr found no object for the target function");
  }
  const std::string path = (lm->l_name != nullptr && lm->l_name[0] != '\0') ? lm->l_name : "/proc/self/exe";
  auto elf = ReadElf(path, nullptr);
  if (!elf) return std::unexpected(elf.error());
  const uint64_t vaddr = reinterpret_cast<uintptr_t>(fn) - static_cast<uint64_t>(lm->l_addr);
  const auto off = elf->FileOffset(vaddr);
  if (!off) return MakeErrorF(ErrorCode::kInternal, "calibration: {:#x} is in no PT_LOAD of {}", vaddr, path);
  const ProbeSpec* launch = nullptr;
  for (const ProbeSpec& p : ProbeTable()) {
    if ((p.flags & CUDA_PROBE_F_LAUNCH) != 0 && (p.flags & CUDA_PROBE_F_GRID3) != 0) {
      launch = &p;
      break;
    }
  }
  if (launch == nullptr) return MakeError(ErrorCode::kInternal, "calibration: no launch probe in the table");
  Target t;
  t.probe = launch->id;
  t.offset = *off;
  t.from_symbol = true;
  t.symbol = "ithbat_probe_calibration_target";

  volatile uint64_t sink = 0;
  auto run = [&]() {
    uint64_t x = sink;
    const int64_t c0 = ThreadCpuNs();
    for (uint64_t i = 0; i < calls; ++i) x = ithbat_probe_calibration_target(x);
    const int64_t c1 = ThreadCpuNs();
    sink = x;
    return static_cast<double>(c1 - c0) / static_cast<double>(calls);
  };
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  HitCost r;
  r.calls = calls;
  std::vector<double> plain, probed;
  for (int i = 0; i < rounds; ++i) plain.push_back(run());
  const uint32_t self = static_cast<uint32_t>(getpid());
  const int64_t a0 = MonoNs();
  auto att = Attach(static_cast<int32_t>(getpid()), path, {t});
  const int64_t a1 = MonoNs();
  if (!att) return std::unexpected(att.error());
  if ((*att)->failed() > 0) return MakeErrorF(ErrorCode::kUnavailable, "calibration: {}", (*att)->first_error());
  for (int i = 0; i < rounds; ++i) probed.push_back(run());
  const int64_t d0 = MonoNs();
  att->reset();
  const int64_t d1 = MonoNs();
  ForgetProcess(self);
  r.unprobed_ns = median(plain);
  r.ns_per_hit = std::max(0.0, median(probed) - r.unprobed_ns);
  r.attach_ns = static_cast<double>(a1 - a0);
  r.detach_ns = static_cast<double>(d1 - d0);
  return r;
}

ProbeBpf::KeyCounts ProbeBpf::CountKeys(uint32_t tgid) const {
  auto n = [&](const bpf_map* m) { return KeysOfTgid(m, tgid).size() / bpf_map__key_size(m); };
  KeyCounts c;
  c.stats = n(skel_->maps.stats);
  c.last_launch = n(skel_->maps.last_launch);
  c.group_depth = n(skel_->maps.group_depth);
  c.entries = n(skel_->maps.entries);
  c.comms = n(skel_->maps.comms);
  return c;
}

int ProbeBpf::DrainRecords(const std::function<void(const cuda_probe_record&)>& fn) {
  sink_ = fn;
  const int n = ring_buffer__consume(rb_);
  sink_ = nullptr;
  return n;
}

cuda_probe_global ProbeBpf::Globals() const {
  cuda_probe_global g{};
  const uint32_t zero = 0;
  bpf_map_lookup_elem(bpf_map__fd(skel_->maps.globals), &zero, &g);
  return g;
}

}  // namespace ithbat::collect::probes
