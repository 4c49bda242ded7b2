#include "collect/joblog/parsers/parser.h"

namespace ithbat::collect::joblog {

const std::vector<ParserInfo>& BuiltinParsers() {
  // Detection order matters only between frameworks whose lines look alike: Megatron's
  // iteration line before the generic parser; NeMo 2's before Lightning's bar.
  static const std::vector<ParserInfo> kParsers = {
      {"hf_trainer", ParserRole::kFramework,
       "Hugging Face Trainer (dict lines, progress bar, checkpoint saves, evals)", &MakeHfTrainerParser},
      {"megatron", ParserRole::kFramework,
       "Megatron-LM, Megatron-DeepSpeed, Megatron-Core/Bridge iteration and checkpoint lines",
       &MakeMegatronParser},
      {"nemo2", ParserRole::kFramework, "NeMo 2.x (nemo.lightning) iteration lines", &MakeNemo2Parser},
      {"lightning", ParserRole::kFramework, "PyTorch Lightning progress bars, NeMo 1.x",
       &MakeLightningParser},
      {"torchtitan", ParserRole::kFramework,
       "torchtitan step and checkpoint lines (with or without rank prefix)", &MakeTorchtitanParser},
      {"nanogpt", ParserRole::kFramework, "nanoGPT iteration lines (old and new)", &MakeNanoGptParser},
      {"fairseq", ParserRole::kFramework, "fairseq train_inner / valid lines", &MakeFairseqParser},
      {"mmengine", ParserRole::kFramework,
       "OpenMMLab: mmengine Epoch(train)/Iter(train) lines (xtuner, mm* 3.x), mmcv 1.x Epoch [e][i/N]",
       &MakeMmengineParser},
      {"loss_scale", ParserRole::kAlwaysOn,
       "fp16 loss scalers: DeepSpeed, apex, Megatron (overflow, skipped steps, scale)", &MakeLossScaleParser},
      {"errors", ParserRole::kAlwaysOn,
       "error classes: CUDA OOM, NCCL watchdog/WARN/errors, elastic failures, tracebacks, ECC/NVLink",
       &MakeErrorParser},
      {"vllm", ParserRole::kAlwaysOn, "vLLM engine stats lines (V0 and V1)", &MakeVllmParser},
      {"sglang", ParserRole::kAlwaysOn, "SGLang prefill/decode batch lines", &MakeSglangParser},
      {"generic", ParserRole::kGeneric, "key: value / key=value lines of unknown trainers",
       &MakeGenericParser},
  };
  return kParsers;
}

const ParserInfo* FindParser(std::string_view name) {
  for (const auto& p : BuiltinParsers()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

}  // namespace ithbat::collect::joblog
