#pragma once
// Follows log files, for sites that disallow eBPF: each file's lines belong to the identity
// configured for it (`--joblog-tail "PATH?job=ID&rank=N"`). Like `tail -F`: a file present at
// Start is read from its end (its history is not replayed as if it just happened); a file that
// appears later, is truncated (size below the read offset) or replaced (another inode under the
// path: rotated) is read from its start. Each Drain reads at most max_bytes_per_drain bytes per
// file, without blocking; the rest waits for the next tick. Records carry the read time (a file
// has no write times) and negative pids: -1 for the first file, -2 for the second, ...
// No thread: Drain does the reading on the collector's thread.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

#include "collect/joblog/capture_source.h"
#include "core/identity.h"
#include "core/result.h"

namespace ithbat::collect::joblog {

struct TailFile {
  std::string path;
  Identity identity;  // job and rank from the configuration; pid unknown
};

// "PATH", "PATH?job=ID", "PATH?job=ID&rank=N&local_rank=N" (keys: job, rank, local_rank).
// Errors: kInvalidArgument naming the entry.
Result<TailFile> ParseTailSpec(std::string_view spec);

struct TailSourceOptions {
  std::vector<TailFile> files;
  size_t max_bytes_per_drain = 1u << 20;  // per file
  bool from_start = false;                // read files present at Start from their start (tests)
};

class TailCaptureSource final : public CaptureSource {
 public:
  explicit TailCaptureSource(TailSourceOptions options);
  ~TailCaptureSource() override;

  CaptureMode mode() const override { return CaptureMode::kTail; }
  std::string_view attachment() const override { return "tail"; }
  Status Start() override;
  void Stop() override;
  size_t Drain(std::vector<CaptureRecord>& out, size_t max_records) override;
  Status Track(int32_t, int32_t, bool) override { return Ok(); }
  Status Untrack(int32_t) override { return Ok(); }
  CaptureCounters Counters() const override { return counters_; }
  std::optional<StreamInfo> Stream(int32_t pid) const override;

  uint64_t reopens() const { return reopens_; }

 private:
  struct File {
    TailFile spec;
    int fd = -1;
    dev_t dev = 0;
    ino_t ino = 0;
    uint64_t offset = 0;
    bool gap_pending = false;  // rotated/truncated: the next record has gap_before set
  };
  void Open(File& f, bool at_end);
  void Close(File& f);

  TailSourceOptions options_;
  std::vector<File> files_;
  CaptureCounters counters_;
  uint64_t reopens_ = 0;
  bool started_ = false;
};

}  // namespace ithbat::collect::joblog
