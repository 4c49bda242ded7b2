#include "collect/sched_io/sched_io_bpf.h"

#include <cerrno>
#include <cstring>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/core.h>

#include "sched_io.skel.h"

namespace ithbat::collect::sched_io {
namespace {

std::string ErrnoText(int err) {
  if (err < 0) err = -err;
  return fmt::format("{} (errno {})", std::strerror(err), err);
}

// Keys of a hash map, bounded by `max` (a map changing under the walk can repeat or skip a key;
// the bound keeps that finite).
template <typename K>
std::vector<K> Keys(int fd, size_t max) {
  std::vector<K> out;
  K key{}, next{};
  const K* prev = nullptr;
  while (out.size() < max && bpf_map_get_next_key(fd, prev, &next) == 0) {
    out.push_back(next);
    key = next;
    prev = &key;
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<SchedIoBpf>> SchedIoBpf::Load(bool attach) {
  std::unique_ptr<SchedIoBpf> b(new SchedIoBpf());
  b->skel_ = sched_io_bpf__open();
  if (!b->skel_) {
    int err = errno;
    return MakeErrorF(ErrorCode::kUnavailable, "BPF load failed: open: {}", ErrnoText(err));
  }
  int err = sched_io_bpf__load(b->skel_);
  const char* step = "load";
  if (err == 0) {
    step = "attach";
    err = sched_io_bpf__attach(b->skel_);
  }
  if (err != 0) {
    const ErrorCode code = (err == -EPERM || err == -EACCES) ? ErrorCode::kPermission : ErrorCode::kUnavailable;
    return MakeErrorF(code, "BPF load failed: {} of sched_io (tp_btf sched_switch/wakeup/fork/exit, sys_enter/exit; "
                      "needs Linux 5.15 or later with BTF): {}",
                      step, ErrnoText(err));
  }
  b->attached_ = true;
  if (!attach) {
    sched_io_bpf__detach(b->skel_);
    b->attached_ = false;
  }
  return b;
}

SchedIoBpf::~SchedIoBpf() {
  if (skel_) sched_io_bpf__destroy(skel_);
}

Status SchedIoBpf::SetAttached(bool attached) {
  if (attached == attached_) return Ok();
  if (!attached) {
    sched_io_bpf__detach(skel_);
    attached_ = false;
    return Ok();
  }
  if (int err = sched_io_bpf__attach(skel_); err != 0) {
    return MakeErrorF(ErrorCode::kUnavailable, "BPF attach of sched_io failed: {}", ErrnoText(err));
  }
  attached_ = true;
  return Ok();
}

Status SchedIoBpf::Track(int32_t pid, int32_t root, bool inherit) {
  if (pid <= 0) return MakeErrorF(ErrorCode::kInvalidArgument, "cannot track pid {}", pid);
  uint32_t key = static_cast<uint32_t>(pid);
  sched_io_track value{};
  value.root = static_cast<uint32_t>(root > 0 ? root : pid);
  value.flags = inherit ? 0 : SCHED_IO_TRACK_NO_INHERIT;
  value.epoch = next_epoch_++;
  if (next_epoch_ == 0) next_epoch_ = 1;
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.tracked), &key, &value, BPF_ANY) != 0) {
    int err = errno;
    return ErrnoError(err == E2BIG ? ErrorCode::kResourceExhausted : ErrorCode::kIo,
                      fmt::format("tracking pid {} in the sched_io BPF map", pid), err);
  }
  return Ok();
}

Status SchedIoBpf::Untrack(int32_t pid) {
  if (pid <= 0) return Ok();
  uint32_t key = static_cast<uint32_t>(pid);
  if (bpf_map_delete_elem(bpf_map__fd(skel_->maps.tracked), &key) != 0 && errno != ENOENT) {
    int err = errno;
    return ErrnoError(ErrorCode::kIo, fmt::format("untracking pid {} in the sched_io BPF map", pid), err);
  }
  return Ok();
}

std::map<uint32_t, uint32_t> SchedIoBpf::Tracked() const {
  std::map<uint32_t, uint32_t> out;
  const int fd = bpf_map__fd(skel_->maps.tracked);
  for (uint32_t k : Keys<uint32_t>(fd, SCHED_IO_MAX_TRACKED)) {
    sched_io_track v{};
    if (bpf_map_lookup_elem(fd, &k, &v) == 0) out[k] = v.root;
  }
  return out;
}

std::map<uint32_t, sched_io_sched> SchedIoBpf::ReadSched() const {
  std::map<uint32_t, sched_io_sched> out;
  const int fd = bpf_map__fd(skel_->maps.sched);
  for (uint32_t k : Keys<uint32_t>(fd, SCHED_IO_MAX_ROOTS)) {
    sched_io_sched v{};
    if (bpf_map_lookup_elem(fd, &k, &v) == 0) out[k] = v;
  }
  return out;
}

std::vector<SchedIoBpf::IoEntry> SchedIoBpf::ReadIo() {
  std::vector<IoEntry> out;
  const int fd = bpf_map__fd(skel_->maps.io);
  const int max_fd = bpf_map__fd(skel_->maps.io_max);
  for (const auto& k : Keys<sched_io_io_key>(fd, SCHED_IO_MAX_IO_KEYS)) {
    IoEntry e;
    e.key = k;
    if (bpf_map_lookup_elem(fd, &k, &e.value) != 0) continue;
    // Read then delete: a call ending between the two is lost from this tick's maximum only.
    if (bpf_map_lookup_elem(max_fd, &k, &e.max_ns) == 0) bpf_map_delete_elem(max_fd, &k);
    out.push_back(e);
  }
  return out;
}

void SchedIoBpf::ForgetRoot(uint32_t root) {
  bpf_map_delete_elem(bpf_map__fd(skel_->maps.sched), &root);
  const int fd = bpf_map__fd(skel_->maps.io);
  const int max_fd = bpf_map__fd(skel_->maps.io_max);
  for (const auto& k : Keys<sched_io_io_key>(fd, SCHED_IO_MAX_IO_KEYS)) {
    if (k.root != root) continue;
    bpf_map_delete_elem(fd, &k);
    bpf_map_delete_elem(max_fd, &k);
  }
}

size_t SchedIoBpf::RetainRoots(const std::set<uint32_t>& roots) {
  size_t untracked = 0;
  const int tfd = bpf_map__fd(skel_->maps.tracked);
  for (uint32_t k : Keys<uint32_t>(tfd, SCHED_IO_MAX_TRACKED)) {
    sched_io_track v{};
    if (bpf_map_lookup_elem(tfd, &k, &v) != 0 || roots.contains(v.root)) continue;
    if (bpf_map_delete_elem(tfd, &k) == 0) ++untracked;
  }
  const int sfd = bpf_map__fd(skel_->maps.sched);
  for (uint32_t k : Keys<uint32_t>(sfd, SCHED_IO_MAX_ROOTS)) {
    if (!roots.contains(k)) bpf_map_delete_elem(sfd, &k);
  }
  for (const struct bpf_map* m : {skel_->maps.io, skel_->maps.io_max}) {
    const int fd = bpf_map__fd(m);
    for (const auto& k : Keys<sched_io_io_key>(fd, SCHED_IO_MAX_IO_KEYS)) {
      if (!roots.contains(k.root)) bpf_map_delete_elem(fd, &k);
    }
  }
  return untracked;
}

void SchedIoBpf::Clear() {
  // Keys first, then deletes: deleting while walking can restart the walk.
  auto clear = [](const struct bpf_map* m, auto key_type, size_t max) {
    using K = decltype(key_type);
    const int fd = bpf_map__fd(m);
    for (const K& k : Keys<K>(fd, max)) bpf_map_delete_elem(fd, &k);
  };
  clear(skel_->maps.tracked, uint32_t{}, SCHED_IO_MAX_TRACKED);
  clear(skel_->maps.threads, uint32_t{}, SCHED_IO_MAX_THREADS);
  clear(skel_->maps.sched, uint32_t{}, SCHED_IO_MAX_ROOTS);
  clear(skel_->maps.io, sched_io_io_key{}, SCHED_IO_MAX_IO_KEYS);
  clear(skel_->maps.io_max, sched_io_io_key{}, SCHED_IO_MAX_IO_KEYS);
}

sched_io_globals SchedIoBpf::Globals() const {
  sched_io_globals g{};
  uint32_t zero = 0;
  bpf_map_lookup_elem(bpf_map__fd(skel_->maps.globals), &zero, &g);
  return g;
}

size_t SchedIoBpf::ThreadEntries() const {
  return Keys<uint32_t>(bpf_map__fd(skel_->maps.threads), SCHED_IO_MAX_THREADS).size();
}

bool SchedIoBpf::HasThread(uint32_t tid) const {
  // The value type is private to the program: look it up as raw bytes of the map's value size.
  std::vector<uint8_t> buf(bpf_map__value_size(skel_->maps.threads));
  return bpf_map_lookup_elem(bpf_map__fd(skel_->maps.threads), &tid, buf.data()) == 0;
}

}  // namespace ithbat::collect::sched_io
