// The error classes over real output (../shared/data/{training,nccl}) and hand-written edges.
// Expected events were written from reading the files.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "collect/joblog/parsers/parser.h"
#include "testutil/testutil.h"

namespace ithbat::collect::joblog {
namespace {

std::vector<std::string> SharedLines(const std::string& rel) { return testing::SharedDataLines(rel); }

std::vector<ParsedEvent> RunAll(const std::vector<std::string>& lines) {
  auto p = MakeErrorParser();
  std::vector<ParsedEvent> out;
  for (const auto& l : lines) p->Parse(LineView{l}, out);
  return out;
}

std::vector<ParsedEvent> One(std::string_view line) {
  auto p = MakeErrorParser();
  std::vector<ParsedEvent> out;
  p->Parse(LineView{line}, out);
  return out;
}

std::optional<std::string> Attr(const ParsedEvent& e, std::string_view key) {
  for (const auto& [k, v] : e.attrs) {
    if (k == key) return v;
  }
  return std::nullopt;
}

std::vector<ParsedEvent> Class(const std::vector<ParsedEvent>& events, std::string_view name) {
  std::vector<ParsedEvent> out;
  for (const auto& e : events) {
    if (e.kind == EventKind::kError && e.name == name) out.push_back(e);
  }
  return out;
}

std::string Bytes(double n, double unit) { return std::to_string(std::llround(n * unit)); }
constexpr double kMiB = 1024.0 * 1024;
constexpr double kGiB = 1024.0 * 1024 * 1024;

TEST(ErrorParserTest, RegisteredAsAlwaysOn) {
  const ParserInfo* info = FindParser("errors");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->role, ParserRole::kAlwaysOn);
  EXPECT_EQ(info->make()->name(), "errors");
}

// ---- CUDA OOM ----------------------------------------------------------------------------------

TEST(ErrorParserTest, CudaOomAllGenerations) {
  auto events = RunAll(SharedLines("training/cuda-oom-message-variants.txt"));
  ASSERT_EQ(events.size(), 7u);  // one per message, nothing else (no traceback header in the file)
  for (const auto& e : events) {
    EXPECT_EQ(e.name, "cuda_oom");
    EXPECT_EQ(Attr(e, "gpu"), "0");
    EXPECT_FALSE(e.text.empty());
  }
  // [A] torch ≥ 2.4
  EXPECT_EQ(Attr(events[0], "tried_bytes"), Bytes(22.78, kGiB));
  EXPECT_EQ(Attr(events[0], "capacity_bytes"), Bytes(31.47, kGiB));
  EXPECT_EQ(Attr(events[0], "free_bytes"), Bytes(12.73, kGiB));
  EXPECT_EQ(Attr(events[0], "process_bytes"), Bytes(18.73, kGiB));
  EXPECT_EQ(Attr(events[0], "allocated_bytes"), Bytes(9.08, kGiB));
  EXPECT_EQ(Attr(events[0], "reserved_unallocated_bytes"), Bytes(9.35, kGiB));
  EXPECT_EQ(Attr(events[0], "reserved_bytes"),
            std::to_string(std::llround(9.08 * kGiB) + std::llround(9.35 * kGiB)));
  // [B] torch.cuda.OutOfMemoryError, MiB sizes
  EXPECT_EQ(Attr(events[1], "tried_bytes"), Bytes(22.00, kMiB));
  EXPECT_EQ(Attr(events[1], "free_bytes"), Bytes(11.06, kMiB));
  EXPECT_EQ(Attr(events[1], "reserved_unallocated_bytes"), Bytes(194.87, kMiB));
  // [C] the "capacty" typo of torch 2.1
  EXPECT_EQ(Attr(events[2], "tried_bytes"), Bytes(32.00, kMiB));
  EXPECT_EQ(Attr(events[2], "capacity_bytes"), Bytes(4.00, kGiB));
  EXPECT_EQ(Attr(events[2], "free_bytes"), Bytes(41.56, kMiB));
  // [D] "0 bytes is free", no process clause
  EXPECT_EQ(Attr(events[3], "capacity_bytes"), Bytes(6.00, kGiB));
  EXPECT_EQ(Attr(events[3], "free_bytes"), "0");
  EXPECT_EQ(Attr(events[3], "process_bytes"), std::nullopt);
  // [E] parenthesised torch 1.13/2.0 form
  EXPECT_EQ(Attr(events[4], "tried_bytes"), Bytes(10.73, kGiB));
  EXPECT_EQ(Attr(events[4], "capacity_bytes"), Bytes(8.00, kGiB));
  EXPECT_EQ(Attr(events[4], "allocated_bytes"), Bytes(17.20, kGiB));
  EXPECT_EQ(Attr(events[4], "free_bytes"), "0");
  EXPECT_EQ(Attr(events[4], "reserved_bytes"), Bytes(19.15, kGiB));
  // [F] RuntimeError form
  EXPECT_EQ(Attr(events[5], "tried_bytes"), Bytes(512.00, kMiB));
  EXPECT_EQ(Attr(events[5], "capacity_bytes"), Bytes(15.90, kGiB));
  EXPECT_EQ(Attr(events[5], "free_bytes"), Bytes(415.88, kMiB));
  EXPECT_EQ(Attr(events[5], "reserved_bytes"), Bytes(14.80, kGiB));
  // [G] torch 1.0 "cached" = reserved
  EXPECT_EQ(Attr(events[6], "tried_bytes"), Bytes(12.50, kMiB));
  EXPECT_EQ(Attr(events[6], "free_bytes"), Bytes(9.28, kGiB));
  EXPECT_EQ(Attr(events[6], "reserved_bytes"), Bytes(4.68, kMiB));
}

TEST(ErrorParserTest, OomAfterTracebackNamesTheException) {
  auto p = MakeErrorParser();
  std::vector<ParsedEvent> out;
  for (std::string_view l : {
           "[rank3]: Traceback (most recent call last):",
           "[rank3]:   File \"train.py\", line 10, in <module>",
           "[rank3]:     loss.backward()",
           "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 3 has a total "
           "capacity of 79.15 GiB of which 1.95 GiB is free.",
       })
    p->Parse(LineView{l}, out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].name, "python_traceback");
  EXPECT_EQ(out[0].rank, 3);
  EXPECT_EQ(Attr(out[0], "exception"), std::nullopt);
  // The exception line gives the OOM and the traceback's exception, one event per class.
  EXPECT_EQ(out[1].name, "python_traceback");
  EXPECT_EQ(Attr(out[1], "exception"), "torch.OutOfMemoryError");
  EXPECT_EQ(out[2].name, "cuda_oom");
  EXPECT_EQ(out[2].rank, 3);
  EXPECT_EQ(Attr(out[2], "gpu"), "3");
  EXPECT_EQ(Attr(out[2], "tried_bytes"), Bytes(20, kMiB));
  EXPECT_EQ(Attr(out[2], "free_bytes"), Bytes(1.95, kGiB));
}

TEST(ErrorParserTest, OomLookAlikes) {
  EXPECT_TRUE(One("the node ran out of memory yesterday").empty());
  EXPECT_TRUE(One("Setting PYTORCH_CUDA_ALLOC_CONF to avoid out of memory errors").empty());
  auto sticky = One("RuntimeError: CUDA error: out of memory");
  ASSERT_EQ(sticky.size(), 1u);
  EXPECT_EQ(sticky[0].name, "cuda_oom");
}

// ---- NaN / inf loss ------------------------------------------------------------------------------

TEST(ErrorParserTest, NanLossSpellings) {
  struct Case {
    std::string_view line;
    std::string_view key;
    bool positive_inf = false;
  };
  for (const Case& c : {
           Case{"{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 0.5}", "loss"},
           Case{"step 100 | loss: nan | lr: 3e-4", "loss"},
           Case{" iteration 5/ 100 | lm loss: NAN | loss scale: 1.0 |", "loss"},
           Case{" iteration 5/ 100 | lm loss: NaN | grad norm: 1.0 |", "loss"},
           Case{"Epoch 0: 10%| 5/50 [00:01<00:09, loss=inf, v_num=1]", "loss", true},
           Case{"Training epoch 0, iteration 3/10 | reduced_train_loss: nan.0 | global_step: 3", "reduced_train_loss"},
           Case{"step: 7  train_loss=-inf", "train_loss"},
           Case{"{\"step\": 9, \"loss\": \"NaN\"}", "loss"},
           Case{"Loss: Infinity", "Loss"},
       }) {
    auto out = One(c.line);
    auto nan = Class(out, "nan_loss");
    ASSERT_EQ(nan.size(), 1u) << c.line;
    EXPECT_EQ(Attr(nan[0], "key"), std::string(c.key)) << c.line;
    EXPECT_FALSE(std::isfinite(nan[0].value)) << c.line;
    if (c.positive_inf) {
      EXPECT_TRUE(std::isinf(nan[0].value) && nan[0].value > 0) << c.line;
      EXPECT_EQ(Attr(nan[0], "value"), "inf");
    }
  }
}

TEST(ErrorParserTest, NanLossFoundAtEveryOffset) {
  // The "loss" search works 16 bytes at a time with a re-aligned last block: every position of
  // the key, with look-alike "os" pairs before and after it, must be found.
  for (size_t before = 0; before < 40; ++before) {
    for (size_t after = 0; after < 24; ++after) {
      std::string line;
      for (size_t i = 0; i < before; ++i) line += (i % 5 == 4) ? ' ' : "pos"[i % 3];
      line += " loss=nan ";
      for (size_t i = 0; i < after; ++i) line += "os "[i % 3];
      auto nan = Class(One(line), "nan_loss");
      EXPECT_EQ(nan.size(), 1u) << "[" << line << "]";
      line.replace(line.find("nan"), 3, "0.5");
      EXPECT_TRUE(Class(One(line), "nan_loss").empty()) << "[" << line << "]";
    }
  }
}

TEST(ErrorParserTest, NanLookAlikesDoNotFire) {
  for (std::string_view line : {
           "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 0.0006, 'epoch': 0.01}",
           "grad_norm: nan",
           " iteration 5/ 100 | grad norm: nan | number of skipped iterations:   0 | number of nan iterations:   0 |",
           "loss: 0.0",
           "loss scale: nan",
           "loss_scale=inf",
           "the loss is nan sometimes, says the FAQ",
           "Warning: NaN or Inf found in input tensor.",
           "val_loss: 4.106 | info: nan-checks enabled",
       }) {
    EXPECT_TRUE(Class(One(line), "nan_loss").empty()) << line;
  }
}

TEST(ErrorParserTest, HealthyAndNanGradTrainingFilesGiveNoErrors) {
  // Nothing in these files is an error: loss 0.0 with grad_norm nan (HF), "grad norm: nan" with
  // "number of nan iterations: 0" (Megatron-DeepSpeed), healthy lines of other frameworks.
  for (const char* f : {
           "training/hf-trainer-modernbert-issue233-loss0-gradnorm-nan.txt",
           "training/hf-trainer-pink-issue6-loss0-gradnorm-nan-flat.txt",
           "training/megatron-deepspeed-bigscience-issue396-grad-norm-nan.txt",
           "training/megatron-llm-issue11-iterations.txt",
           "training/nemo2-bionemo-pr740-iteration-lines.txt",
           "training/torchtitan-pr3393-grad-norm-format.txt",
           "training/fairseq-issue2681-train-inner.txt",
           "training/lightning-issue4225-v1-progress-bar-loss.txt",
           "training/deepspeed-overflow-loss-scale-collapse.txt",
           "serving/vllm-v0-engine-log-formats-swapped-pending.txt",
           "serving/sglang-decode-batch-log-formats.txt",
       }) {
    auto events = RunAll(SharedLines(f));
    EXPECT_TRUE(events.empty()) << f << ": " << (events.empty() ? "" : events[0].name + " on " + events[0].text);
  }
}

TEST(ErrorParserTest, TracebackWithoutExceptionLine) {
  // The excerpt ends inside the traceback: one event, no exception.
  auto events = RunAll(SharedLines("training/megatron-lm-issue314-checkpoint-save-then-crash.txt"));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].name, "python_traceback");
  EXPECT_EQ(Attr(events[0], "exception"), std::nullopt);
}

TEST(ErrorParserTest, TracebackExceptionBoundedAndChained) {
  auto p = MakeErrorParser();
  std::vector<ParsedEvent> out;
  p->Parse(LineView{"Traceback (most recent call last):"}, out);
  p->Parse(LineView{"  File \"a.py\", line 1, in <module>"}, out);
  p->Parse(LineView{"INFO: not an exception"}, out);  // log line interleaved: not an exception type
  p->Parse(LineView{"KeyError: 'input_ids'"}, out);
  p->Parse(LineView{"ValueError: a later line, no traceback open"}, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(Attr(out[1], "exception"), "KeyError");

  // Past the window, an exception line no longer belongs to the traceback.
  out.clear();
  p->Parse(LineView{"Traceback (most recent call last):"}, out);
  for (int i = 0; i < 600; ++i) p->Parse(LineView{"  File \"deep.py\", line 1, in f"}, out);
  p->Parse(LineView{"RecursionError: maximum recursion depth exceeded"}, out);
  EXPECT_EQ(out.size(), 1u);
}

// ---- NCCL watchdog ---------------------------------------------------------------------------------

TEST(ErrorParserTest, WatchdogTimeoutNewFormat) {
  auto events = RunAll(SharedLines("nccl/llamafactory-issue6269-watchdog-reduce-scatter.txt"));
  ASSERT_EQ(events.size(), 3u);  // the "Exception ... detected by watchdog" companions give none
  const int ranks[] = {0, 4, 3};
  const char* ran[] = {"600061", "600099", "600089"};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(events[i].name, "nccl_timeout");
    EXPECT_EQ(events[i].rank, ranks[i]);
    EXPECT_EQ(Attr(events[i], "seq"), "7753");
    EXPECT_EQ(Attr(events[i], "op_type"), "_REDUCE_SCATTER_BASE");
    EXPECT_EQ(Attr(events[i], "numel_in"), "544997376");
    EXPECT_EQ(Attr(events[i], "numel_out"), "68124672");
    EXPECT_EQ(Attr(events[i], "timeout_ms"), "600000");
    EXPECT_EQ(Attr(events[i], "ran_ms"), ran[i]);
  }
  auto allreduce = RunAll(SharedLines("nccl/llamafactory-issue7396-watchdog-allreduce.txt"));
  ASSERT_EQ(allreduce.size(), 2u);
  EXPECT_EQ(allreduce[0].rank, 0);
  EXPECT_EQ(allreduce[1].rank, 4);
  EXPECT_EQ(Attr(allreduce[1], "seq"), "1580");
  EXPECT_EQ(Attr(allreduce[1], "op_type"), "ALLREDUCE");
  EXPECT_EQ(Attr(allreduce[1], "numel_in"), "466119168");
}

TEST(ErrorParserTest, WatchdogTimeoutOldFormat) {
  auto events = RunAll(SharedLines("nccl/ofa-issue271-watchdog-old-format-1800s.txt"));
  ASSERT_EQ(events.size(), 5u);
  const int ranks[] = {1, 3, 2, 6, 7};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(events[i].name, "nccl_timeout");
    EXPECT_EQ(events[i].rank, ranks[i]);
    EXPECT_EQ(Attr(events[i], "seq"), "469508");
    EXPECT_EQ(Attr(events[i], "op_type"), "ALLREDUCE");
    EXPECT_EQ(Attr(events[i], "timeout_ms"), "1800000");
    EXPECT_EQ(Attr(events[i], "numel_in"), std::nullopt);
  }
  // A Lightning bar with the watchdog line glued on (no newline between them).
  auto glued = RunAll(SharedLines("nccl/pytorch-issue118369-nemo-progress-then-watchdog.txt"));
  ASSERT_EQ(glued.size(), 5u);
  const char* seqs[] = {"96120", "96117", "96125", "96125", "64088"};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(glued[i].name, "nccl_timeout");
    EXPECT_EQ(Attr(glued[i], "seq"), seqs[i]);
  }
  EXPECT_EQ(glued[0].rank, 0);
  EXPECT_EQ(glued[4].rank, 7);
  EXPECT_EQ(Attr(glued[4], "ran_ms"), "25625251");
}

TEST(ErrorParserTest, WatchdogValuesCutWithTheLineAreDroppedNotMisread) {
  // The real rank-0 line of llamafactory #6269, cut at every length: a value is read whole or not
  // at all ("SeqNum=77" is not collective 77, "OpType=_REDUCE" is not another operation).
  const auto lines = SharedLines("nccl/llamafactory-issue6269-watchdog-reduce-scatter.txt");
  std::string full;
  for (const auto& l : lines) {
    if (l.find("[Rank 0] Watchdog caught") != std::string::npos) full = l;
  }
  ASSERT_FALSE(full.empty());
  const std::pair<const char*, const char*> kWhole[] = {
      {"seq", "7753"},           {"op_type", "_REDUCE_SCATTER_BASE"},
      {"numel_in", "544997376"}, {"numel_out", "68124672"},
      {"timeout_ms", "600000"},  {"ran_ms", "600061"}};
  size_t with_seq = 0;
  for (size_t n = full.find("Watchdog caught"); n <= full.size(); ++n) {
    auto events = RunAll({full.substr(0, n)});
    if (events.empty()) continue;
    ASSERT_EQ(events.size(), 1u) << n;
    for (const auto& [key, value] : kWhole) {
      const auto got = Attr(events[0], key);
      if (got) {
        EXPECT_EQ(*got, value) << key << " at length " << n;
      }
    }
    with_seq += Attr(events[0], "seq").has_value() ? 1 : 0;
  }
  EXPECT_GT(with_seq, 100u);  // most cuts keep the collective number
}

TEST(ErrorParserTest, HeartbeatMonitorAndStuckWatchdog) {
  auto events = RunAll(SharedLines("nccl/pytorch-heartbeat-monitor-timeout-watchdog-stuck.txt"));
  ASSERT_EQ(events.size(), 5u);  // 1 + FATAL in [1], 3 heartbeat lines in [2]; "preparing to dump" is none
  const int ranks[] = {144, 144, 1, 0, 2};
  const char* pending[] = {"1", "1", "103", "84", "103"};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(events[i].name, "nccl_watchdog_stuck");
    EXPECT_EQ(events[i].rank, ranks[i]);
    EXPECT_EQ(Attr(events[i], "pending_work"), pending[i]) << i;
  }
  EXPECT_EQ(Attr(events[1], "stuck_seconds"), "600");
  EXPECT_EQ(Attr(events[0], "stuck_seconds"), std::nullopt);
}

// ---- NCCL WARN / NCCL errors -------------------------------------------------------------------------

TEST(ErrorParserTest, IbCompletionNewFormat) {
  auto events = RunAll(SharedLines("nccl/nccl-issue1405-ib-completion-ipv6-gid.txt"));
  ASSERT_EQ(events.size(), 2u);  // "NCCL INFO ... -> 6" unwinding lines give none
  const auto& e = events[0];
  // Retries exhausted towards the peer: the fabric or the peer itself (port counters decide).
  EXPECT_EQ(e.name, "nccl_net_error");
  EXPECT_EQ(Attr(e, "transport"), "ib");
  EXPECT_EQ(Attr(e, "suspect"), "link_or_peer");
  EXPECT_EQ(Attr(e, "status_name"), "IBV_WC_RETRY_EXC_ERR");
  EXPECT_EQ(events[1].name, "nccl_net_error");
  EXPECT_EQ(Attr(e, "host"), "kp-ddp-worker-0");
  EXPECT_EQ(Attr(e, "pid"), "3468");
  EXPECT_EQ(Attr(e, "tid"), "3905");
  EXPECT_EQ(Attr(e, "cuda_dev"), "4");
  EXPECT_EQ(Attr(e, "source"), "ib_plugin.c:1615");
  EXPECT_EQ(Attr(e, "peer"), "10.216.210.236");
  EXPECT_EQ(Attr(e, "peer_port"), "54862");
  EXPECT_EQ(Attr(e, "status"), "12");
  EXPECT_EQ(Attr(e, "opcode"), "0");
  EXPECT_EQ(Attr(e, "len"), "0");
  EXPECT_EQ(Attr(e, "vendor_err"), "129");
  EXPECT_EQ(Attr(e, "direction"), "Recv");
  EXPECT_EQ(Attr(e, "local_gid"), "fd00:1148:9000:5000:4:200:3:ff22");
  EXPECT_EQ(Attr(e, "remote_gid"), "fd00:1148:9000:5000:4:200:3:ff1f");
  EXPECT_EQ(Attr(events[1], "opcode"), "32616");
}

TEST(ErrorParserTest, IbCompletionOldFormat) {
  auto events = RunAll(SharedLines("nccl/nccl-issue928-ib-old-format-error4-h100.txt"));
  ASSERT_EQ(events.size(), 2u);
  // NCCL < 2.19 wording: "with error 4" is a local protection error — the memory registration
  // (GPUDirect RDMA) on this host, not the fabric.
  for (const auto& e : events) {
    EXPECT_EQ(e.name, "nccl_net_error");
    EXPECT_EQ(Attr(e, "suspect"), "local");
    EXPECT_EQ(Attr(e, "status_name"), "IBV_WC_LOC_PROT_ERR");
  }
  EXPECT_EQ(Attr(events[0], "host"), "H100-2");
  EXPECT_EQ(Attr(events[0], "pid"), "19989");
  EXPECT_EQ(Attr(events[0], "tid"), "20082");
  EXPECT_EQ(Attr(events[0], "cuda_dev"), "1");
  EXPECT_EQ(Attr(events[0], "source"), "transport/net_ib.cc:1295");
  EXPECT_EQ(Attr(events[0], "peer"), "fe80::966d:ae03:8b:df78%ib0");
  EXPECT_EQ(Attr(events[0], "peer_port"), "53249");
  EXPECT_EQ(Attr(events[0], "status"), "4");
  EXPECT_EQ(Attr(events[0], "opcode"), "32564");
  EXPECT_EQ(Attr(events[0], "len"), "32564");
  EXPECT_EQ(Attr(events[0], "vendor_err"), "81");
  EXPECT_EQ(Attr(events[0], "direction"), "Send");
  EXPECT_EQ(Attr(events[1], "host"), "H100-1");
  EXPECT_EQ(Attr(events[1], "peer"), "fe80::966d:ae03:8b:df50%ib0");
}

TEST(ErrorParserTest, NcclErrorVariants) {
  auto events = RunAll(SharedLines("nccl/nccl-error-exception-variants.txt"));
  auto errors = Class(events, "nccl_error");
  ASSERT_EQ(errors.size(), 5u);
  // [1] torch 2.4 DistBackendError + the ncclUnhandledCudaError line, both from rank 7.
  EXPECT_EQ(errors[0].rank, 7);
  EXPECT_EQ(Attr(errors[0], "code"), "ncclUnhandledCudaError");
  EXPECT_EQ(Attr(errors[0], "reason"), "unhandled cuda error");
  EXPECT_EQ(Attr(errors[0], "location"), "../torch/csrc/distributed/c10d/NCCLUtils.hpp:275");
  EXPECT_EQ(Attr(errors[0], "nccl_version"), "2.20.5");
  EXPECT_EQ(Attr(errors[0], "exception"), "DistBackendError");
  EXPECT_EQ(errors[1].rank, 7);
  EXPECT_EQ(Attr(errors[1], "code"), "ncclUnhandledCudaError");
  // [2] torch 1.x RuntimeError + ncclSystemError explanation.
  EXPECT_EQ(Attr(errors[2], "code"), "ncclSystemError");
  EXPECT_EQ(Attr(errors[2], "nccl_version"), "2.7.8");
  EXPECT_EQ(Attr(errors[2], "location"), "/pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:825");
  EXPECT_EQ(Attr(errors[3], "code"), "ncclSystemError");
  // [3] bare "NCCL error in:" title.
  EXPECT_EQ(Attr(errors[4], "code"), "ncclSystemError");
  EXPECT_EQ(Attr(errors[4], "nccl_version"), "2.18.1");

  // [4] socket WARN chain: three WARN lines, the "-> 6" INFO lines give none. The two socket
  // failures (broken pipe, closed by the remote peer) are network errors pointing at the peer;
  // the proxy's "Failed to execute operation" is a plain warning.
  std::vector<ParsedEvent> warns;
  for (const auto& e : events)
    if (e.name == "nccl_warn" || e.name == "nccl_net_error") warns.push_back(e);
  ASSERT_EQ(warns.size(), 3u);
  EXPECT_EQ(warns[0].name, "nccl_net_error");
  EXPECT_EQ(Attr(warns[0], "transport"), "socket");
  EXPECT_EQ(Attr(warns[0], "suspect"), "peer");
  EXPECT_EQ(warns[1].name, "nccl_warn");
  EXPECT_EQ(Attr(warns[1], "suspect"), std::nullopt);
  EXPECT_EQ(warns[2].name, "nccl_net_error");
  EXPECT_EQ(Attr(warns[0], "host"), "a100-st-p4d24xlarge-22");
  EXPECT_EQ(Attr(warns[0], "pid"), "183006");
  EXPECT_EQ(Attr(warns[0], "tid"), "183220");
  EXPECT_EQ(Attr(warns[0], "cuda_dev"), "1");
  EXPECT_EQ(Attr(warns[0], "source"), "misc/socket.cc:518");
  EXPECT_EQ(Attr(warns[1], "source"), "proxy.cc:1119");
  EXPECT_EQ(Attr(warns[2], "tid"), "183181");

  // [5] torch 2.6 teardown ends in an elastic failure.
  auto elastic = Class(events, "elastic_failure");
  ASSERT_EQ(elastic.size(), 1u);
  EXPECT_EQ(Attr(elastic[0], "exit_code"), "1");
  EXPECT_EQ(Attr(elastic[0], "local_rank"), "0");
  EXPECT_EQ(Attr(elastic[0], "pid"), "88");
  EXPECT_EQ(events.size(), 9u);
}

// ---- torch.distributed.elastic ---------------------------------------------------------------------

TEST(ErrorParserTest, ElasticSigtermTeardown) {
  auto events = RunAll(SharedLines("nccl/elastic-llamafactory-issue163-sigterm-exitcode.txt"));
  auto elastic = Class(events, "elastic_failure");
  ASSERT_EQ(elastic.size(), 4u);
  const char* pids[] = {"153929", "153930", "153931"};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(Attr(elastic[i], "pid"), pids[i]);
    EXPECT_EQ(Attr(elastic[i], "signal"), "SIGTERM");
    EXPECT_EQ(Attr(elastic[i], "action"), "terminate");
  }
  EXPECT_EQ(Attr(elastic[3], "exit_code"), "1");
  EXPECT_EQ(Attr(elastic[3], "local_rank"), "7");
  EXPECT_EQ(Attr(elastic[3], "pid"), "153932");
  EXPECT_EQ(Attr(elastic[3], "signal"), std::nullopt);
  EXPECT_EQ(Attr(elastic[3], "binary"), "/home/panww/miniconda3/tools/bin/python");
  // "stderr: Traceback (most recent call last):" — the launcher's own traceback, cut before its exception.
  auto tb = Class(events, "python_traceback");
  ASSERT_EQ(tb.size(), 1u);
  EXPECT_EQ(events.size(), 5u);
}

TEST(ErrorParserTest, ElasticChildFailedBlock) {
  auto events = RunAll(SharedLines("nccl/elastic-mmseg-issue3106-childfailed-sigabrt.txt"));
  ASSERT_EQ(events.size(), 3u);
  const char* ranks[] = {"1", "2", "0"};
  const char* pids[] = {"2385923", "2385924", "2385922"};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(events[i].name, "elastic_failure");
    EXPECT_EQ(Attr(events[i], "exit_code"), "-6");
    EXPECT_EQ(Attr(events[i], "signal"), "SIGABRT");
    EXPECT_EQ(Attr(events[i], "rank"), ranks[i]);
    EXPECT_EQ(Attr(events[i], "local_rank"), ranks[i]);
    EXPECT_EQ(Attr(events[i], "pid"), pids[i]);
  }
  EXPECT_EQ(Attr(events[0], "root_cause"), std::nullopt);
  EXPECT_EQ(Attr(events[2], "root_cause"), "1");
}

TEST(ErrorParserTest, ElasticSigkill) {
  auto out = One("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 4 (pid: 364592) "
                 "of binary: /usr/bin/python3");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(Attr(out[0], "exit_code"), "-9");
  EXPECT_EQ(Attr(out[0], "signal"), "SIGKILL");
  EXPECT_EQ(Attr(out[0], "local_rank"), "4");
  EXPECT_EQ(Attr(out[0], "pid"), "364592");
}

// ---- sticky CUDA errors ----------------------------------------------------------------------------

TEST(ErrorParserTest, EccAndNvlinkFromTheApplication) {
  auto events = RunAll(SharedLines("nccl/cuda-sticky-errors-ecc-nvlink-app-side.txt"));
  ASSERT_EQ(events.size(), 2u);  // the "CUDA kernel errors might be asynchronously reported" advice is none
  EXPECT_EQ(events[0].name, "ecc_uncorrectable");
  EXPECT_EQ(Attr(events[0], "message"), "uncorrectable ECC error encountered");
  EXPECT_EQ(events[1].name, "nvlink_uncorrectable");
}

TEST(ErrorParserTest, OtherStickyCudaErrors) {
  for (std::string_view msg : {"an illegal memory access was encountered", "unspecified launch failure",
                               "device-side assert triggered"}) {
    const std::string line = "RuntimeError: CUDA error: " + std::string(msg);
    auto out = One(line);
    ASSERT_EQ(out.size(), 1u) << line;
    EXPECT_EQ(out[0].name, "cuda_error");
    EXPECT_EQ(Attr(out[0], "message"), std::string(msg));
  }
}

// ---- rejection ------------------------------------------------------------------------------------

TEST(ErrorParserTest, ProseAndForeignLines) {
  for (std::string_view line : {
           "",
           "x",
           "There was an error in my reasoning, the ECC is fine.",
           "Error handling is described in docs/errors.md",
           "errors: 0 warnings: 2",
           "NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
           "node1:123:456 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB",
           "see the exitcode documentation",
           "Traceback handling was improved in Python 3.11",
           "local_rank is set from the environment",
           "loss went down nicely",
       }) {
    auto p = MakeErrorParser();
    std::vector<ParsedEvent> out;
    EXPECT_FALSE(p->Parse(LineView{line}, out)) << line;
    EXPECT_TRUE(out.empty()) << line << " → " << (out.empty() ? "" : out[0].name);
  }
}

TEST(ErrorParserTest, LongLinesAreCutInText) {
  std::string line = "RuntimeError: CUDA error: an illegal memory access was encountered ";
  line += std::string(kMaxLineBytes, 'x');
  auto out = One(line);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_LE(out[0].text.size(), kMaxEventTextBytes);
}


TEST(ErrorParserTest, NanLossWithASpaceAsSeparatorOnlyBeforeACommaOrTheEnd) {
  auto p = MakeErrorParser();
  std::vector<ParsedEvent> out;
  p->Parse(LineView{"iter 11: loss nan, time 100.00ms, mfu 30.00%"}, out);
  ASSERT_EQ(Class(out, kErrorNanLoss).size(), 1u) << "nanoGPT prints the loss after one space";
  out.clear();
  p->Parse(LineView{"iter 12: loss inf"}, out);
  EXPECT_EQ(Class(out, kErrorNanLoss).size(), 1u);
  out.clear();
  p->Parse(LineView{"we saw loss nan issues with fp16 before"}, out);
  p->Parse(LineView{"iter 13: loss 4.2000, time 100.00ms"}, out);
  EXPECT_TRUE(Class(out, kErrorNanLoss).empty()) << "prose and finite losses are not NaN losses";
}

}  // namespace
}  // namespace ithbat::collect::joblog
